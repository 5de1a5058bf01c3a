"""The model-size ladder: ``observer-ci run`` cold and from the export cache, from about 5M
to about 600M parameters, for a decoder-only ``generate()`` (Llama, one graph) and an
encoder-decoder ``generate()`` (T5: encoder, decoder, decoder with past, merged decoder).

For each rung it prints, per run (cold, then a cache hit): wall and CPU seconds, peak RSS
of the child process and its ratio to the float32 weights (target <= 2.5x), the replay's
share of the run (target < 10% at the top), and hit / cold wall (targets: <= 0.3x small,
<= 0.2x at 600M). The load average is printed with each row: read figures from a loaded
machine as such. Random weights from tiny configs scaled up; no hub download. Prints
figures, asserts nothing. Run:
    python benchmarks/bench_ladder.py [--sizes 5,50,200,600] [--families llama,t5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# hidden size, layers per target size in millions of parameters (vocab 32000 for Llama:
# the embedding is a real share of small models, as in practice)
LLAMA = {5: (128, 2), 50: (512, 8), 200: (1024, 12), 600: (1536, 20)}
T5 = {5: (128, 2), 50: (512, 6), 200: (768, 12), 600: (1280, 14)}

SCRIPT = """
import torch, transformers
import observer_ci
torch.manual_seed(0)
family, hidden, layers = {family!r}, {hidden}, {layers}
if family == "llama":
    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=hidden, intermediate_size=hidden * 3,
        num_hidden_layers=layers, num_attention_heads=max(2, hidden // 64),
        num_key_value_heads=max(1, hidden // 128), max_position_embeddings=256)
    model = transformers.LlamaForCausalLM(config).eval()
else:
    config = transformers.T5Config(
        vocab_size=32000, d_model=hidden, d_kv=64, d_ff=hidden * 3, num_layers=layers,
        num_decoder_layers=layers, num_heads=max(2, hidden // 64), decoder_start_token_id=0)
    model = transformers.T5ForConditionalGeneration(config).eval()
ids = torch.randint(0, 32000, (2, 12))
with torch.no_grad(), observer_ci.observe(model, name=f"{{family}}_{{layers}}x{{hidden}}"):
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False)
print("PARAMS", sum(p.numel() for p in model.parameters()))
"""


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def run(script: Path, out: Path, cache: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "observer_ci", "run", str(script), "--out", str(out)]
    cmd += ["--cache-dir", str(cache), "--cache-max-mb", "0", "--no-gate"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    begin = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - begin
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        print(stderr[-2000:])
    results = json.loads((out / "results.json").read_text())
    models = results["models"]
    phases = models[0].get("phase_seconds", {}) if models else {}
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        # the child resets its RSS high-water mark per phase (pipeline/memory.py): its
        # ru_maxrss counts from the last reset, peak_rss_bytes from the start
        "rss_mb": max(usage.ru_maxrss / 1024, (results.get("peak_rss_bytes") or 0) / 2**20),
        "replay": phases.get("replay", 0.0),
        "status": models[0]["status"] if models else "none",
    }


def params_of(script: Path) -> int:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import runpy,sys; sys.argv=[sys.argv[1]]; runpy.run_path(sys.argv[0])",
            str(script),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("PARAMS")), "PARAMS 0")
    return int(line.split()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="5,50,200,600")
    parser.add_argument("--families", default="llama,t5")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        "| model | params | run | wall s | cpu s | peak RSS MB | RSS / fp32 weights | "
        "replay share | hit / cold wall | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for family in args.families.split(","):
            table = LLAMA if family == "llama" else T5
            for size in sizes:
                hidden, layers = table[size]
                script = root / f"{family}_{size}.py"
                script.write_text(SCRIPT.format(family=family, hidden=hidden, layers=layers))
                params = params_of(script)
                cache = root / f"cache_{family}_{size}"
                cold = run(script, root / f"cold_{family}_{size}", cache)
                hit = run(script, root / f"hit_{family}_{size}", cache)
                for name, r in (("cold", cold), ("hit", hit)):
                    share = r["replay"] / r["wall"] if r["wall"] else 0.0
                    ratio = f"{hit['wall'] / cold['wall']:.2f}x" if name == "hit" else ""
                    print(
                        f"| {family} {size}M ({r['status']}) | {params / 1e6:.0f}M | {name} | "
                        f"{r['wall']:.1f} | {r['cpu']:.1f} | {r['rss_mb']:.0f} | "
                        f"{r['rss_mb'] * 2**20 / (4 * params):.2f}x | {share:.0%} | {ratio} | "
                        f"{load()} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
