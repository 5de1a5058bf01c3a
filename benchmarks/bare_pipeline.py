"""The bare essential pipeline of a shipped example, written directly (no observer-ci):
import, run the example's model calls, ``torch.onnx.export(dynamo=True)`` with hand-written
dynamic shapes, replay every call in onnxruntime and compare. The yardstick of
``bench_speed.py``; prints its phases' seconds as JSON (``phases: {...}``), the export and
the replay timed, the script being the rest of the example's function.
Run: python benchmarks/bare_pipeline.py mlp|text|llama OUT_DIR
  or python benchmarks/bare_pipeline.py ladder-llama OUT_DIR HIDDEN LAYERS
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

DYNAMIC = torch.export.Dim.DYNAMIC
PHASES: dict[str, float] = {}


def replay(onnx_path: Path, feeds: list[dict[str, np.ndarray]], expected: list[list[np.ndarray]]):
    start = time.perf_counter()
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for feed, want in zip(feeds, expected):
        for _ in range(2):  # warm-up, as observer-ci does
            session.run(None, feed)
        times = []
        for _ in range(10):
            begin = time.perf_counter()
            got = session.run(None, feed)
            times.append(time.perf_counter() - begin)
        worst = max([worst, *(float(np.abs(g - w).max()) for g, w in zip(got, want) if g.size)])
    PHASES["replay"] = time.perf_counter() - start
    return worst


def export(model, args, kwargs, dynamic_shapes, path: Path) -> None:
    begin = time.perf_counter()
    with torch.no_grad():
        program = torch.onnx.export(
            model,
            args,
            kwargs=kwargs,
            dynamic_shapes=dynamic_shapes,
            dynamo=True,
            opset_version=20,
            verbose=False,
        )
    program.save(str(path))
    PHASES["export"] = time.perf_counter() - begin


def mlp(out: Path) -> float:
    class Classifier(torch.nn.Module):
        def __init__(self, n_features: int = 16, n_classes: int = 4):
            super().__init__()
            self.body = torch.nn.Sequential(
                torch.nn.Linear(n_features, 32), torch.nn.GELU(), torch.nn.Linear(32, n_classes)
            )

        def forward(self, x):
            return self.body(x).softmax(dim=-1)

    torch.manual_seed(0)
    model = Classifier().eval()
    inputs = [torch.randn(b, 16) for b in (2, 3, 5)]
    with torch.no_grad():
        outputs = [model(x) for x in inputs]
    path = out / "mlp.onnx"
    export(model, (inputs[0],), None, ({0: DYNAMIC},), path)
    feeds = [{"x": x.numpy()} for x in inputs]
    return replay(path, feeds, [[o.numpy()] for o in outputs])


def text(out: Path) -> float:
    class TextEncoder(torch.nn.Module):
        def __init__(self, vocab: int = 100, dim: int = 32):
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, dim)
            self.mix = torch.nn.Linear(dim, dim)

        def forward(self, input_ids, attention_mask, memory=None, normalize: bool = False):
            h = self.embed(input_ids) * attention_mask.unsqueeze(-1).to(torch.float32)
            if memory is not None:
                h = torch.cat([memory, h], dim=1)
            h = self.mix(h)
            pooled = h.mean(dim=1)
            if normalize:
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
            return {"hidden": h, "pooled": pooled}

    def batch(size: int, length: int, memory: int) -> dict:
        return {
            "input_ids": torch.randint(0, 100, (size, length)),
            "attention_mask": torch.ones(size, length, dtype=torch.int64),
            "memory": torch.randn(size, memory, 32),
        }

    torch.manual_seed(0)
    model = TextEncoder().eval()
    calls = [batch(2, 7, 0), batch(3, 9, 4), batch(4, 5, 6)]  # memory of length 0 = absent
    with torch.no_grad():
        outputs = [model(**c, normalize=True) for c in calls]
    path = out / "text.onnx"
    dims = {
        "input_ids": {0: DYNAMIC, 1: DYNAMIC},
        "attention_mask": {0: DYNAMIC, 1: DYNAMIC},
        "memory": {0: DYNAMIC, 1: DYNAMIC},
        "normalize": None,
    }
    export(model, (), {**calls[1], "normalize": True}, dims, path)
    feeds = [{k: v.numpy() for k, v in c.items()} for c in calls]
    return replay(path, feeds, [[o["hidden"].numpy(), o["pooled"].numpy()] for o in outputs])


def llama(out: Path, hidden: int = 0, layers: int = 0) -> float:
    """The Llama example; ``hidden``/``layers`` given: a rung of ``bench_ladder.py`` (vocab
    32000, 3 new tokens, every call kept), as that benchmark's script builds it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from observer_ci.observing.pytrees import make_dynamic_cache, register_transformers_pytrees

    register_transformers_pytrees()  # DynamicCache as a pytree: the export needs it
    vocab = 32000 if hidden else 1000
    hidden, layers = hidden or 64, layers or 2
    heads, kv_heads = (max(2, hidden // 64), max(1, hidden // 128)) if vocab > 1000 else (4, 2)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 3 if vocab > 1000 else 128,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    input_ids = torch.randint(3, vocab, (2, 12 if vocab > 1000 else 5))
    head_dim = hidden // heads
    calls: list[dict] = []
    outputs: list[np.ndarray] = []
    names = ("input_ids", "attention_mask", "position_ids")

    def before(module, args, kwargs):
        cache = kwargs.get("past_key_values")
        kept = [(la.keys, la.values) for la in getattr(cache, "layers", []) if la.keys is not None]
        # distinct empty tensors: one tensor fed as several inputs is exported as one
        pairs = [(k.clone(), v.clone()) for k, v in kept] or [
            (torch.zeros(2, kv_heads, 0, head_dim), torch.zeros(2, kv_heads, 0, head_dim))
            for _ in range(layers)
        ]
        calls.append({**{n: kwargs[n].clone() for n in names}, "pairs": pairs})

    def after(module, args, kwargs, output):
        outputs.append(output.logits.detach().clone().numpy())

    pre = model.register_forward_pre_hook(before, with_kwargs=True)
    post = model.register_forward_hook(after, with_kwargs=True)
    with torch.no_grad():
        model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=5 if vocab == 1000 else 3,  # the example: 5 calls, the first 3 kept
            do_sample=False,
            pad_token_id=0,
        )
    pre.remove()
    post.remove()
    calls, outputs = calls[:3], outputs[:3]  # the example's store_n_calls=3
    sample = calls[0]  # the prefill (seq >= 2: a decode step traces is_causal as SymBool)
    kwargs = {n: sample[n] for n in names}
    kwargs["past_key_values"] = make_dynamic_cache(sample["pairs"])
    kwargs["logits_to_keep"] = 1  # what generate() passes: the last position's logits
    both = {0: DYNAMIC, 1: DYNAMIC}
    cache_dims = {0: DYNAMIC, 2: DYNAMIC}
    dims = {n: both for n in names}
    dims["past_key_values"] = [[cache_dims] * layers, [cache_dims] * layers]
    dims["logits_to_keep"] = None
    path = out / "llama.onnx"
    export(model, (), kwargs, dims, path)
    feeds = []
    for call in calls:
        feed = {n: call[n].numpy() for n in names}
        for i, (k, v) in enumerate(call["pairs"]):
            feed[f"past_key_values_key_cache_{i}"] = k.numpy()
            feed[f"past_key_values_value_cache_{i}"] = v.numpy()
        feeds.append(feed)
    return replay(path, feeds, [[o] for o in outputs])


def main() -> None:
    which, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    begin = time.perf_counter()
    if which == "ladder-llama":  # ladder-llama OUT HIDDEN LAYERS (bench_ladder.py)
        worst = llama(out, int(sys.argv[3]), int(sys.argv[4]))
    else:
        worst = {"mlp": mlp, "text": text, "llama": llama}[which](out)
    PHASES["script"] = time.perf_counter() - begin - PHASES["export"] - PHASES["replay"]
    print(f"{which}: max abs diff {worst:.2e}")
    print("phases: " + json.dumps(PHASES))


if __name__ == "__main__":
    main()
