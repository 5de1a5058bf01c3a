"""The model-size ladder: ``observer-ci run`` cold and from the export cache, from about 5M
to about 600M parameters, for a decoder-only ``generate()`` (Llama, one graph) and an
encoder-decoder ``generate()`` (T5: encoder, decoder, decoder with past, merged decoder).

For each rung it prints, per run (cold, then a cache hit): wall and CPU seconds, peak RSS
of the child process and its ratio to the float32 weights (target <= 2.5x), the replay's
share of the run (target < 10% at the top), and hit / cold wall (targets: <= 0.3x small,
<= 0.2x at 600M). The load average is printed with each row: read figures from a loaded
machine as such. On the Llama rungs the bare pipeline (``bare_pipeline.py ladder-llama``,
the same model) runs too, and each row shows its ratios to it (``--no-bare`` skips it).
Results: notes/ladder.md. Random weights from tiny configs scaled up; no hub download. Prints
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
import os
if os.environ.get("LADDER_PARAMS_ONLY"):
    print("PARAMS", sum(p.numel() for p in model.parameters()))
    raise SystemExit(0)
ids = torch.randint(0, 32000, (2, 12))
with torch.no_grad(), observer_ci.observe(model, name=f"{{family}}_{{layers}}x{{hidden}}"):
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False)
print("PARAMS", sum(p.numel() for p in model.parameters()))
"""


def run(script: Path, out: Path, cache: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "observer_ci", "run", str(script), "--out", str(out)]
    cmd += ["--cache-dir", str(cache), "--cache-max-mb", "0", "--no-gate"]
    load_before = os.getloadavg()[0]
    begin = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - begin
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        print(stderr[-2000:])
    load_avg = (load_before + os.getloadavg()[0]) / 2
    if not (out / "results.json").exists():
        return {
            "wall": wall,
            "cpu": 0.0,
            "rss_mb": 0.0,
            "replay": 0.0,
            "status": "crashed",
            "load": load_avg,
        }
    results = json.loads((out / "results.json").read_text())
    models = results["models"]
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        # the child resets its RSS high-water mark per phase (pipeline/memory.py): its
        # ru_maxrss counts from the last reset, peak_rss_bytes from the start
        "rss_mb": max(usage.ru_maxrss / 1024, (results.get("peak_rss_bytes") or 0) / 2**20),
        "replay": sum(m.get("phase_seconds", {}).get("replay", 0.0) for m in models),
        "status": ",".join(sorted({m["status"] for m in models})) or "none",
        # a "hit" that exported again (the key moved: observer-ci's own source is in it,
        # so editing the package between the cold run and the hit makes a miss)
        "exported": sum(
            not (g.get("export") or {}).get("cached", False)
            for m in models
            for g in m.get("graphs", [])
            if (g.get("export") or {}).get("ok")
        ),
        "load": load_avg,
        "notes": " / ".join(notes_of(m) for m in models),
    }


def notes_of(model: dict) -> str:
    """The model's notes and warnings, and its graphs, in one short cell."""
    texts = [*model.get("notes", []), *(w["message"] for w in model.get("warnings", []))]
    texts = [t for t in texts if not t.startswith("arguments not exported")]
    graphs = ",".join(g["name"] for g in model.get("graphs", []))
    return f"{model.get('name', '')}: {graphs}; " + "; ".join(
        t.replace("|", "/")[:160] for t in texts
    )


def bare(family: str, hidden: int, layers: int, out: Path) -> dict[str, float] | None:
    """The bare pipeline (``bare_pipeline.py ladder-llama``) on the same model: Llama only."""
    if family != "llama":
        return None
    cmd = [sys.executable, str(REPO / "benchmarks" / "bare_pipeline.py"), "ladder-llama"]
    load_before = os.getloadavg()[0]
    begin = time.perf_counter()
    proc = subprocess.Popen(
        [*cmd, str(out), str(hidden), str(layers)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - begin
    if os.waitstatus_to_exitcode(status) != 0:
        print((proc.stderr.read() if proc.stderr else b"").decode(errors="replace")[-2000:])
        return None
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
        "load": (load_before + os.getloadavg()[0]) / 2,
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
        env={**os.environ, "PYTHONPATH": str(REPO), "LADDER_PARAMS_ONLY": "1"},
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("PARAMS")), "PARAMS 0")
    return int(line.split()[1])


def row(family: str, size: int, params: int, name: str, r: dict, runs: dict) -> None:
    """One markdown row: a run's figures and its ratios to the cold run and the bare one."""
    base, cold = runs.get("bare"), runs["cold"]

    def ratio(key: str, of: dict | None) -> str:
        return f"{r[key] / of[key]:.2f}x" if of and of[key] and name != "bare" else ""

    share = f"{r['replay'] / r['wall']:.0%}" if "replay" in r and r["wall"] else ""
    status = r.get("status", "bare")
    if name == "hit" and r.get("exported"):
        status += f", NOT A HIT: {r['exported']} graph(s) exported again"
    vs_cold = ratio("wall", cold) if name == "hit" else ""
    print(
        f"| {family} {size}M ({status}) | {params / 1e6:.0f}M | "
        f"{4 * params / 2**20:.0f} | {name} | {r['wall']:.1f} | {r['cpu']:.1f} | "
        f"{r['rss_mb']:.0f} | {r['rss_mb'] * 2**20 / (4 * params):.2f}x | {share} | {vs_cold} | "
        f"{ratio('wall', base)} | {ratio('cpu', base)} | {ratio('rss_mb', base)} | "
        f"{r['load']:.1f} | {r.get('notes', '')} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="5,50,200,600")
    parser.add_argument("--families", default="llama,t5")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare pipeline")
    parser.add_argument(
        "--keep", type=Path, help="write every run (results.json, logs) here and keep it"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        "| model | params | weights MB | run | wall s | cpu s | peak RSS MB | RSS / fp32 weights "
        "| replay share | / cold wall | / bare wall | / bare cpu | / bare RSS | load | notes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for family in args.families.split(","):
            table = LLAMA if family == "llama" else T5
            for size in sizes:
                hidden, layers = table[size]
                script = root / f"{family}_{size}.py"
                script.write_text(SCRIPT.format(family=family, hidden=hidden, layers=layers))
                params = params_of(script)
                cache = root / f"cache_{family}_{size}"
                runs = {"cold": run(script, root / f"cold_{family}_{size}", cache)}
                runs["hit"] = run(script, root / f"hit_{family}_{size}", cache)
                if not args.no_bare:
                    runs["bare"] = bare(family, hidden, layers, root / f"bare_{family}_{size}")
                for name, r in runs.items():
                    if r is not None:
                        row(family, size, params, name, r, runs)


if __name__ == "__main__":
    main()
