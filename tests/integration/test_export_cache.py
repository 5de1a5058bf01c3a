"""The export cache: hits across fresh processes, keys that move with what matters,
damaged entries discarded and rebuilt (real exports, real files, real onnxruntime)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from observer_ci.observing.observer import InputObserver
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.export_cache import MANIFEST, ExportCache, export_key
from observer_ci.pipeline.scripts import run_scripts
from tests.support import REPO_ROOT

REPO = REPO_ROOT
MLP = REPO / "examples" / "mlp_classifier.py"
FAST = RunConfig(warmup=0, repeat=1, probe=False)

KEY_OF_EXAMPLE = f"""
import runpy, sys
from observer_ci.observing import registry
from observer_ci.pipeline.family_server import export_cache_key
with registry.current_script({str(MLP)!r}):
    runpy.run_path({str(MLP)!r}, run_name="__main__")
(entry,) = registry.take_registered()
print(export_cache_key(entry))
print("transformers" in sys.modules)
"""


def run_mlp(out: Path, cache: Path):
    config = RunConfig(**{**FAST.__dict__, "cache_dir": str(cache)})
    (model,) = run_scripts([MLP], out, config=config, progress=lambda m: None).models
    return model


@pytest.fixture(scope="module")
def cold_and_hit(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    cold = run_mlp(root / "cold", root / "cache")
    hit = run_mlp(root / "hit", root / "cache")
    return root, cold, hit


def test_an_unchanged_model_is_restored_and_replayed(cold_and_hit):
    root, cold, hit = cold_and_hit
    assert cold.export.cached is False and hit.export.cached is True
    assert hit.status == "ok" and len(hit.observations) == 3  # onnxruntime ran the restored file
    assert hit.export.cache_key == cold.export.cache_key
    assert Path(hit.export.onnx_path).read_bytes() == Path(cold.export.onnx_path).read_bytes()
    assert (hit.export.node_count, hit.export.input_dims) == (
        cold.export.node_count,
        cold.export.input_dims,
    )
    assert Path(hit.export.onnx_path).parent == root / "hit" / "onnx"


def test_the_key_is_the_same_in_fresh_processes(cold_and_hit):
    _, cold, _ = cold_and_hit
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "random"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", KEY_OF_EXAMPLE], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert [o[0] for o in outputs] == [cold.export.cache_key] * 2
    assert [o[1] for o in outputs] == ["False", "False"]  # a plain MLP never loads transformers


@pytest.mark.parametrize(
    "damage",
    ["flip a byte of the ONNX file", "truncate the facts", "no manifest", "escaping name"],
)
def test_a_damaged_entry_is_discarded(cold_and_hit, tmp_path, damage):
    root, cold, _ = cold_and_hit
    shutil.copytree(root / "cache", tmp_path / "cache")
    cache = ExportCache(tmp_path / "cache")
    entry = cache.entry_dir(cold.export.cache_key)
    if damage == "flip a byte of the ONNX file":
        onnx_file = next(entry.glob("*.onnx"))
        data = bytearray(onnx_file.read_bytes())
        data[len(data) // 2] ^= 0xFF
        onnx_file.write_bytes(bytes(data))
    elif damage == "truncate the facts":
        facts = entry / "export.json"
        facts.write_bytes(facts.read_bytes()[:10])
    elif damage == "no manifest":
        (entry / MANIFEST).unlink()
    else:
        manifest = json.loads((entry / MANIFEST).read_text())
        manifest["files"]["../outside.onnx"] = "0"
        (entry / MANIFEST).write_text(json.dumps(manifest))
    target = tmp_path / "out" / "m.onnx"
    assert cache.load(cold.export.cache_key, target) is None
    assert not entry.exists() and not target.exists()


def test_a_damaged_entry_is_rebuilt_by_the_next_run(cold_and_hit, tmp_path):
    root, cold, _ = cold_and_hit
    shutil.copytree(root / "cache", tmp_path / "cache")
    entry = ExportCache(tmp_path / "cache").entry_dir(cold.export.cache_key)
    onnx_file = next(entry.glob("*.onnx"))
    onnx_file.write_bytes(onnx_file.read_bytes()[:-7])  # a partial write
    rebuilt = run_mlp(tmp_path / "out", tmp_path / "cache")
    assert rebuilt.status == "ok" and rebuilt.export.cached is False
    loaded = ExportCache(tmp_path / "cache").load(cold.export.cache_key, tmp_path / "x.onnx")
    assert loaded is not None and loaded.node_count == cold.export.node_count
    assert (tmp_path / "x.onnx").read_bytes() == onnx_file.read_bytes()  # the rebuilt file


MODEL_FILE = """
import torch

def double(x):
    return x * 2

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return double(self.linear(x))
"""


def key_of_checkout(directory: Path, source: str) -> str:
    """The key of ``Net`` imported from ``directory/model_def.py`` (a checkout)."""
    import importlib.util

    directory.mkdir(parents=True)
    (directory / "model_def.py").write_text(source)
    spec = importlib.util.spec_from_file_location("model_def", directory / "model_def.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return observed_key(module.Net().eval())


def test_the_key_depends_on_the_code_not_on_where_it_is_checked_out(tmp_path):
    head = key_of_checkout(tmp_path / "head", MODEL_FILE)
    assert key_of_checkout(tmp_path / "base-worktree", MODEL_FILE) == head
    changed_helper = MODEL_FILE.replace("x * 2", "x * 3")  # a function the model calls
    assert key_of_checkout(tmp_path / "other", changed_helper) != head


class Scaled(torch.nn.Module):
    def __init__(self, scale: float = 2.0):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.scale = scale

    def forward(self, x):
        return self.linear(x) * self.scale


def observed_key(model: torch.nn.Module, batches=(2, 3)) -> str:
    observer = InputObserver()
    with torch.no_grad(), observer(model):
        for b in batches:
            model(torch.ones(b, 4))
    return export_key(model, observer, opset=20)


def test_the_key_moves_with_weights_attributes_and_calls_only():
    torch.manual_seed(0)
    model = Scaled().eval()
    reference = observed_key(model)
    torch.manual_seed(0)
    assert observed_key(Scaled().eval()) == reference  # a new instance, same everything
    changed = {}
    torch.manual_seed(0)
    changed["scale attribute"] = observed_key(Scaled(scale=3.0).eval())
    with torch.no_grad():
        model.linear.bias[0] += 1e-6
    changed["one weight"] = observed_key(model)
    with torch.no_grad():
        model.linear.bias[0] -= 1e-6
    assert observed_key(model) == reference
    changed["other call shapes"] = observed_key(model, batches=(2, 5, 7))
    model.train()
    changed["training mode"] = observed_key(model)
    assert len({reference, *changed.values()}) == len(changed) + 1, changed


# -- the size cap: least recently used entries go first ----------------------------------


def some_keys(n: int) -> list[str]:
    return [f"{i:02x}" + "ab" * 19 for i in range(n)]


def tick() -> None:
    time.sleep(0.02)  # file times move in clock ticks of a few milliseconds


def test_the_least_recently_used_entries_are_evicted_past_the_cap(cold_and_hit, tmp_path):
    _, cold, _ = cold_and_hit
    k = some_keys(5)
    assert ExportCache(tmp_path / "c", max_bytes=None).store(k[0], cold.export)
    ((_, size, _),) = ExportCache(tmp_path / "c").entries()
    cache = ExportCache(tmp_path / "c", max_bytes=3 * size + size // 2)  # room for three
    for key in k[1:3]:
        tick()
        assert cache.store(key, cold.export)
    tick()
    assert cache.load(k[0], tmp_path / "out" / "m.onnx") is not None  # a hit: used again
    tick()
    assert cache.store(k[3], cold.export)
    assert [key for _, _, key in cache.entries()] == [k[2], k[0], k[3]]  # k1: least used
    tick()
    with cache.lock(k[2]) as held:  # another run is restoring k2: it stays
        assert held
        assert cache.store(k[4], cold.export)
    assert [key for _, _, key in cache.entries()] == [k[2], k[3], k[4]]
    assert sum(s for _, s, _ in cache.entries()) <= cache.max_bytes
    assert cache.load(k[2], tmp_path / "out" / "m.onnx").ok  # what stays is still whole


def test_an_entry_over_the_whole_cap_is_stored_alone_and_says_so(cold_and_hit, tmp_path):
    _, cold, _ = cold_and_hit
    first, key = some_keys(2)
    assert ExportCache(tmp_path / "c", max_bytes=None).store(first, cold.export)
    small = ExportCache(tmp_path / "c", max_bytes=1000)
    outcome = small.store(key, cold.export)
    assert cold.export.file_size > 1000 and outcome.stored
    assert "larger than the cache's cap" in outcome.note and "raise cache-max-mb" in outcome.note
    assert [k for _, _, k in small.entries()] == [key]  # the older entry made room
    assert small.load(key, tmp_path / "m.onnx").cached


def test_damaged_entries_and_stale_temporaries_go_first(cold_and_hit, tmp_path):
    _, cold, _ = cold_and_hit
    k = some_keys(3)
    unbounded = ExportCache(tmp_path / "c", max_bytes=None)
    for key in k:
        assert unbounded.store(key, cold.export)
    (unbounded.entry_dir(k[2]) / MANIFEST).unlink()  # a partial entry: the newest, no manifest
    stale, fresh = tmp_path / "c" / "00" / ".tmp-old", tmp_path / "c" / "00" / ".tmp-new"
    for d in (stale, fresh):
        d.mkdir()
        (d / "m.onnx").write_bytes(b"x")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    size = unbounded.entries()[-1][1]
    cache = ExportCache(tmp_path / "c", max_bytes=2 * size + size // 2)
    assert cache.evict() == [k[2]]
    assert not stale.exists() and fresh.exists()
    assert cache.load(k[0], tmp_path / "m.onnx") and cache.load(k[1], tmp_path / "m.onnx")


def test_a_run_under_a_cap_stores_its_export_and_its_inputs_within_limits(cold_and_hit, tmp_path):
    _, cold, _ = cold_and_hit
    old = some_keys(2)
    seed = ExportCache(tmp_path / "cache", max_bytes=None)
    for key in old:
        assert seed.store(key, cold.export)
        tick()
    size = seed.entries()[0][1]
    config = RunConfig(
        **{
            **FAST.__dict__,
            "cache_dir": str(tmp_path / "cache"),
            "cache_max_bytes": 2 * size + size // 2,
            "save_feeds": True,
            "feeds_max_bytes": 100,  # under one call's inputs
        }
    )
    (model,) = run_scripts([MLP], tmp_path / "out", config=config, progress=lambda m: None).models
    assert model.status == "ok" and model.export.cached is False
    kept = [key for _, _, key in ExportCache(tmp_path / "cache").entries()]
    assert kept == [old[1], cold.export.cache_key]  # the oldest went
    assert any("not saved for paired timing" in n for n in model.notes)
    assert not list((tmp_path / "out" / "onnx").glob("*.feeds.npz"))


HIT_IN_A_FRESH_PROCESS = """
import json, sys
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.scripts import run_scripts
config = RunConfig(warmup=0, repeat=1, probe=False, cache_dir=sys.argv[2])
(model,) = run_scripts([sys.argv[1]], sys.argv[3], config=config, progress=lambda m: None).models
heavy = ["onnx", "onnxscript", "onnx_ir", "torch.onnx._internal.exporter._registration"]
print(json.dumps({"cached": model.export.cached, "status": model.status,
                  "loaded": [m for m in heavy if m in sys.modules]}))
"""


def test_a_hit_loads_neither_onnx_nor_the_exporter(cold_and_hit, tmp_path):
    root, _, _ = cold_and_hit
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", HIT_IN_A_FRESH_PROCESS, str(MLP), str(root / "cache"), tmp_path],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts == {"cached": True, "status": "ok", "loaded": []}, out.stderr[-2000:]


def test_a_hit_links_the_entry_and_a_write_through_the_link_is_caught(cold_and_hit, tmp_path):
    root, cold, _ = cold_and_hit
    cache = ExportCache(tmp_path / "c", max_bytes=None)
    key = "ab" * 20
    assert cache.store(key, cold.export)
    target = tmp_path / "out" / "m.onnx"
    assert cache.load(key, target).cached
    stored = cache.entry_dir(key) / Path(cold.export.onnx_path).name
    assert os.path.samefile(target, stored)  # linked: no bytes copied
    time.sleep(0.02)
    with open(target, "r+b") as f:  # a tool rewriting the output in place
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    assert cache.load(key, tmp_path / "again.onnx") is None  # checksums read again: discarded
    assert not cache.entry_dir(key).exists()


def test_weights_are_hashed_once_per_script_and_still_follow_writes():
    from observer_ci.pipeline import export_cache

    model = torch.nn.Linear(8, 8)
    first = export_cache._state_digest(model)
    assert id(model.weight) in export_cache._BYTES_DIGESTS  # memoised
    assert export_cache._state_digest(model) == first
    with torch.no_grad():
        model.weight.mul_(2)  # moves the version counter
    second = export_cache._state_digest(model)
    assert second != first
    model.bias.data.add_(1)  # moves nothing the memo sees...
    export_cache.forget_weight_digests()  # ...which is why each script starts without it
    assert export_cache._state_digest(model) != second


def test_weights_hashed_in_threads_give_the_one_thread_digest_and_follow_writes():
    """A large model's weights are hashed one thread per core: the same key, memoised alike."""
    from observer_ci.pipeline import export_cache

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(1024, 1024) for _ in range(20)))  # 80 MB
    assert sum(p.numel() * 4 for p in model.parameters()) > export_cache._PARALLEL_HASH_BYTES
    export_cache.forget_weight_digests()
    export_cache._digest_in_parallel(model)
    if (os.cpu_count() or 1) >= 2:
        assert all(id(p) in export_cache._BYTES_DIGESTS for p in model.parameters())
    threaded = export_cache._state_digest(model)
    export_cache.forget_weight_digests()
    one_thread = hashlib.blake2b(digest_size=20)
    for name, module in model.named_modules():  # the key's recipe, tensor by tensor
        one_thread.update(
            f"M:{name}:{type(module).__module__}.{type(module).__qualname__}".encode()
        )
        for pname, tensor in module.named_parameters(recurse=False):
            export_cache._hash_tensor(one_thread, f"P:{pname}", tensor)
        attributes = vars(module)
        for key in sorted(attributes):
            if key not in export_cache._MODULE_INTERNALS:
                one_thread.update(f"A:{key}=".encode())
                export_cache._hash_value(one_thread, attributes[key], depth=0)
    assert threaded == one_thread.hexdigest()
    with torch.no_grad():
        model[7].weight[3, 3] += 1.0  # one element of one layer
    assert export_cache._state_digest(model) != threaded
