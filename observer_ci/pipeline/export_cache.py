"""A content-addressed cache of ONNX exports, shared by runs (base and head, CI jobs).

Key: a hash of everything the exported graph depends on:

- the model's tensors (parameters, buffers, tensor attributes: names, dtypes, shapes, bytes)
  and its plain attributes (sizes, flags, ``config`` objects, training mode),
- the source of its code: every file holding a function of the model's classes, followed
  through the globals those functions use (a helper in another file counts), with the
  bytecode as fallback when a file cannot be read; torch/onnx code is covered by versions,
- the exported signature: every observed call's inferred export arguments (tree structure,
  dtypes, shapes, constants), the dynamic shapes, the method name and the opset,
- the versions of Python, torch, onnx, onnxscript, onnxruntime-independent exporter parts,
  transformers when the script imported it, and observer-ci's own source.

Value: the ONNX file(s) and the export facts (:class:`ExportResult`), in
``<cache>/<key[:2]>/<key>/`` with a manifest of checksums. Entries are written into a
temporary directory and renamed into place (atomic); an entry whose manifest or checksums do
not match is discarded and rebuilt, never trusted. Concurrent runs (base and head) take a
per-key file lock, so an unchanged model is exported once and the other run hits.

Size: the cache holds at most ``max_bytes`` (default 2 GiB, ``--cache-max-mb`` or
``$OBSERVER_CI_CACHE_MAX_MB``; 0 for no cap). A hit stamps its entry as used (the manifest's
modification time); after each store the least recently used entries are evicted until the
cache fits, skipping any entry another process holds the lock of. An entry larger than the
whole cap is stored alone (the cap follows the largest model seen; the model's notes say so).

Loads hard-link the entry's files (a copy where links are not possible) and read their
checksums once per entry: later loads compare size, modification time and inode with what
that check saw (``verified.json``). An output file is unlinked before a new export writes
there, so a graph linked from the cache is replaced, never rewritten in place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import time
import types
import uuid
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from observer_ci.core.logs import logger
from observer_ci.core.results import ExportResult
from observer_ci.core.run_options import parse_cache_max_mb

CACHE_DIR_ENV = "OBSERVER_CI_CACHE_DIR"
CACHE_MAX_MB_ENV = "OBSERVER_CI_CACHE_MAX_MB"
DEFAULT_CACHE_MAX_MB = 2048
MB = 1 << 20
KEY_VERSION = "2"  # bump when the key's recipe changes
MANIFEST = "manifest.json"
FACTS = "export.json"
LOCK_WAIT_SECONDS = 900.0  # a holder slower than this is ignored (we export ourselves)
STALE_TEMP_SECONDS = 3600.0  # a temporary directory this old was left by a killed run
_VERSIONED_PACKAGES = ("torch", "onnx", "onnxscript", "onnx_ir", "numpy")
_MAX_CODE_FILES = 400
_PARALLEL_HASH_BYTES = 64 * MB  # below it the weights are hashed in one thread
_HASH_THREADS = 4


def resolve_cache_dir(value: str | os.PathLike[str] | None, env: Any = None) -> Path | None:
    """The cache directory: the explicit value, else ``$OBSERVER_CI_CACHE_DIR``, else none."""
    env = os.environ if env is None else env
    text = str(value) if value else env.get(CACHE_DIR_ENV, "")
    return Path(text).expanduser().resolve() if text.strip() else None


def resolve_cache_max_bytes(value: int | str | None, env: Any = None) -> int | None:
    """The size cap in bytes: the explicit value in MB, else ``$OBSERVER_CI_CACHE_MAX_MB``,
    else :data:`DEFAULT_CACHE_MAX_MB`; ``None`` for 0 (no cap). Raises ``ValueError`` for a
    value that is not a whole number of MB >= 0."""
    env = os.environ if env is None else env
    if isinstance(value, int):
        return value * MB or None
    text = str(value).strip() if value is not None else ""
    if text:
        return parse_cache_max_mb(text) * MB or None
    text = (env.get(CACHE_MAX_MB_ENV) or "").strip()
    try:
        return parse_cache_max_mb(text or str(DEFAULT_CACHE_MAX_MB)) * MB or None
    except ValueError as e:
        raise ValueError(f"${CACHE_MAX_MB_ENV} {e}") from e


# --------------------------------------------------------------------------------------
# The key
# --------------------------------------------------------------------------------------


def export_key(
    model: Any,
    observer: Any,
    *,
    method_name: str = "forward",
    set_batch_dimension_for: Any = None,
    opset: int | None = None,
    extra: Any = None,
) -> str:
    """The cache key of exporting ``model.<method_name>`` from what ``observer`` recorded."""
    h = hashlib.blake2b(digest_size=20)
    _feed(h, "key", KEY_VERSION)
    _feed(h, "versions", _versions(model))
    _feed(h, "signature", _signature_digest(observer, set_batch_dimension_for))
    _feed(h, "method", [method_name, opset, repr(set_batch_dimension_for), repr(extra)])
    _feed(h, "state", _state_digest(model))
    _feed(h, "code", _code_digest(model))
    return h.hexdigest()


def _feed(h: Any, label: str, value: Any) -> None:
    h.update(label.encode())
    h.update(b"\0")
    h.update(value if isinstance(value, bytes) else json.dumps(value, sort_keys=True).encode())
    h.update(b"\1")


def _versions(model: Any) -> dict[str, str]:
    """Python, the exporter's packages, and every library the model's classes come from
    (transformers for a transformers model; never one the process merely imported)."""
    versions = {"python": sys.version.split()[0], "observer_ci": _own_source_digest()}
    names = set(_VERSIONED_PACKAGES)
    modules = model.modules() if callable(getattr(model, "modules", None)) else [model]
    for module in modules:
        for cls in type(module).__mro__:
            names.add((getattr(cls, "__module__", "") or "").split(".")[0])
    for name in sorted(names - {"", "__main__", "builtins"} - set(sys.stdlib_module_names)):
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None) if module else None
        if version is None:
            try:
                version = importlib.metadata.version(name.replace("_", "-"))
            except (importlib.metadata.PackageNotFoundError, ValueError):
                version = "no distribution"  # the repository's own code: hashed as files
        versions[name] = str(version)
    return versions


_OWN_DIGEST: str | None = None


def _own_source_digest() -> str:
    """observer-ci's own code (the version string does not move during development)."""
    global _OWN_DIGEST
    if _OWN_DIGEST is None:
        h = hashlib.blake2b(digest_size=16)
        for path in sorted(Path(__file__).parent.glob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
        _OWN_DIGEST = h.hexdigest()
    return _OWN_DIGEST


def _signature_digest(observer: Any, set_batch_dimension_for: Any) -> str:
    """Every observed call as the exporter would see it, plus the dynamic shapes."""
    import torch.utils._pytree as pytree

    h = hashlib.blake2b(digest_size=20)
    for index in range(observer.num_obs()):
        leaves, spec = pytree.tree_flatten(observer.infer_arguments(index))
        h.update(str(spec).encode())
        for leaf in leaves:
            h.update(_leaf_text(leaf).encode())
    h.update(repr(observer.infer_dynamic_shapes(set_batch_dimension_for)).encode())
    return h.hexdigest()


def _leaf_text(leaf: Any) -> str:
    import torch

    if isinstance(leaf, torch.Tensor):
        return f"T({leaf.dtype},{tuple(leaf.shape)})"
    return f"V({type(leaf).__qualname__},{leaf!r})"


# -- weights, buffers and attributes ---------------------------------------------------------

_MODULE_INTERNALS = frozenset(
    {
        "_parameters",
        "_buffers",
        "_modules",
        "_non_persistent_buffers_set",
        "_state_dict_hooks",
        "_state_dict_pre_hooks",
        "_load_state_dict_pre_hooks",
        "_load_state_dict_post_hooks",
    }
)


def _state_digest(model: Any) -> str:
    import torch

    _digest_in_parallel(model)
    h = hashlib.blake2b(digest_size=20)
    modules = list(model.named_modules()) if isinstance(model, torch.nn.Module) else [("", model)]
    for name, module in modules:
        h.update(f"M:{name}:{type(module).__module__}.{type(module).__qualname__}".encode())
        if isinstance(module, torch.nn.Module):
            for pname, tensor in module.named_parameters(recurse=False):
                _hash_tensor(h, f"P:{pname}", tensor)
            for bname, tensor in module.named_buffers(recurse=False):
                _hash_tensor(h, f"B:{bname}", tensor)
        attributes = vars(module) if hasattr(module, "__dict__") else {}
        for key in sorted(attributes):
            if key in _MODULE_INTERNALS:
                continue
            h.update(f"A:{key}=".encode())
            _hash_value(h, attributes[key], depth=0)
    return h.hexdigest()


def _hash_tensor(h: Any, label: str, tensor: Any) -> None:
    t = tensor.detach()
    h.update(f"{label}:{t.dtype}:{tuple(t.shape)}:{t.layout}".encode())
    if _has_bytes(t):
        h.update(_bytes_digest(tensor))


def _has_bytes(tensor: Any) -> bool:
    """A tensor whose bytes the key hashes: strided, with storage (not on ``meta``)."""
    import torch

    return tensor.layout == torch.strided and tensor.device.type != "meta"


# id(tensor) -> (the tensor, weakly; its version counter; its data pointer; digest of bytes)
_BYTES_DIGESTS: dict[int, tuple[Any, int, int, bytes]] = {}


def forget_weight_digests() -> None:
    """Drops the memo of :func:`_bytes_digest`: called before each observation script, so
    a write the memo cannot see (``param.data.mul_(2)`` moves no version counter) can only
    come from code that runs before the memo is filled again, never between two keys."""
    _BYTES_DIGESTS.clear()


def _bytes_digest(tensor: Any) -> bytes:
    """A digest of a tensor's bytes, computed once per process while the tensor lives and
    is not written to (its version counter moves with every in-place write through it, its
    data pointer with a new ``.data``): a model with several call families, or several
    entries of one script sharing weights, hashes its weights once."""
    memo = _memoised(tensor)
    if memo is not None:
        return memo
    digest = _digest_of(tensor)
    _memoise(tensor, digest)
    return digest


def _tensor_stamp(tensor: Any) -> tuple[int, int]:
    try:
        return tensor._version, tensor.data_ptr()
    except (AttributeError, RuntimeError):
        return -1, -1


def _memoised(tensor: Any) -> bytes | None:
    memo = _BYTES_DIGESTS.get(id(tensor))
    stamp = _tensor_stamp(tensor)
    if memo is not None and memo[0]() is tensor and memo[1:3] == stamp and stamp[0] >= 0:
        return memo[3]
    return None


def _digest_of(tensor: Any) -> bytes:
    """blake2b of the tensor's bytes (hashlib lets go of the GIL: threads hash in parallel)."""
    import torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return hashlib.blake2b(
        memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else b"", digest_size=20
    ).digest()


def _memoise(tensor: Any, digest: bytes) -> None:
    version, pointer = _tensor_stamp(tensor)
    try:
        ref = weakref.ref(tensor, lambda _, key=id(tensor): _BYTES_DIGESTS.pop(key, None))
    except TypeError:
        return  # not weak-referenceable: not memoised
    _BYTES_DIGESTS[id(tensor)] = (ref, version, pointer, digest)


def _digest_in_parallel(model: Any) -> None:
    """Fills the memo for a large model's parameters and buffers with one thread per core
    (a 665M-parameter model: 2.5 GB hashed in about half the time on 2 cores); the key then
    reads the digests in its own order. A small model is hashed as it is met."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return
    seen: dict[int, Any] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        if _has_bytes(tensor) and _memoised(tensor) is None:
            seen.setdefault(id(tensor), tensor)
    tensors = list(seen.values())
    total = sum(t.numel() * t.element_size() for t in tensors)
    workers = min(len(tensors), os.cpu_count() or 1, _HASH_THREADS)
    if total < _PARALLEL_HASH_BYTES or workers < 2:
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="observer-ci-hash") as pool:
        digests = list(pool.map(_digest_of, tensors))
    for tensor, digest in zip(tensors, digests):
        _memoise(tensor, digest)


def _hash_value(h: Any, value: Any, depth: int) -> None:
    """Plain attributes by value; objects by type (their tensors are hashed as tensors)."""
    import torch

    if depth > 6:
        h.update(b"<deep>")
    elif value is None or isinstance(value, (bool, int, float, str, bytes, complex)):
        h.update(repr(value).encode())
    elif isinstance(value, torch.Tensor):
        _hash_tensor(h, "t", value)
    elif isinstance(value, torch.nn.Module):
        h.update(f"<module {type(value).__qualname__}>".encode())  # hashed on its own
    elif isinstance(value, (torch.dtype, torch.device, enum.Enum)):
        h.update(repr(value).encode())
    elif isinstance(value, dict):
        h.update(b"{")
        for k in sorted(value, key=repr):
            h.update(repr(k).encode())
            _hash_value(h, value[k], depth + 1)
        h.update(b"}")
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        h.update(b"[")
        for item in items:
            _hash_value(h, item, depth + 1)
        h.update(b"]")
    elif callable(getattr(value, "to_dict", None)):  # configuration objects (transformers)
        h.update(f"<{type(value).__qualname__}>".encode())
        with contextlib.suppress(Exception):
            _hash_value(h, value.to_dict(), depth + 1)
    elif isinstance(value, (types.FunctionType, types.MethodType)):
        h.update(f"<fn {getattr(value, '__qualname__', '?')}>".encode())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        h.update(f"<{type(value).__qualname__}>".encode())
        _hash_value(h, vars(value), depth + 1)
    else:  # an opaque object: its type only (an address in a repr is not deterministic)
        h.update(f"<{type(value).__module__}.{type(value).__qualname__}>".encode())


# -- code ------------------------------------------------------------------------------------


def _code_digest(model: Any) -> str:
    """Source files (bytecode when unreadable) of the model's classes and what they call."""
    import torch

    roots: list[Any] = []
    modules = list(model.modules()) if isinstance(model, torch.nn.Module) else [model]
    for module in modules:
        for cls in type(module).__mro__:
            if cls not in roots and not _is_versioned(getattr(cls, "__module__", "")):
                roots.append(cls)
        for attr in ("_forward_hooks", "_forward_pre_hooks"):  # hooks change what runs
            roots.extend(getattr(module, attr, {}).values())
    walker = _CodeWalker()
    for item in roots:
        walker.visit(item, depth=0)
    h = hashlib.blake2b(digest_size=20)
    for part in sorted(walker.parts.values()):  # by content: the checkout's path never counts
        h.update(part)
    return h.hexdigest()


def _is_versioned(module_name: str) -> bool:
    top = (module_name or "").split(".")[0]
    return top in _VERSIONED_PACKAGES or top in sys.stdlib_module_names or top == "builtins"


class _CodeWalker:
    """Follows functions, classes and the globals they name, up to a few levels."""

    MAX_DEPTH = 3

    def __init__(self) -> None:
        self.parts: dict[str, bytes] = {}
        self.seen: set[int] = set()

    def visit(self, obj: Any, depth: int) -> None:
        if id(obj) in self.seen or len(self.parts) > _MAX_CODE_FILES:
            return
        self.seen.add(id(obj))
        if isinstance(obj, type):
            if _is_versioned(getattr(obj, "__module__", "")):
                return
            for member in vars(obj).values():
                self.visit(_function_of(member), depth)
        elif isinstance(obj, types.FunctionType):
            if _is_versioned(getattr(obj, "__module__", "") or ""):
                return
            self._add_code(obj.__code__)
            if depth < self.MAX_DEPTH:
                for name in _names_used(obj.__code__):
                    target = obj.__globals__.get(name)
                    if isinstance(target, (type, types.FunctionType)):
                        self.visit(target, depth + 1)
                    elif isinstance(target, types.ModuleType):
                        self._add_module(target)
        elif isinstance(obj, (types.MethodType, functools.partial)):
            self.visit(getattr(obj, "__func__", getattr(obj, "func", None)), depth)

    def _add_code(self, code: types.CodeType) -> None:
        path = code.co_filename
        qualname = getattr(code, "co_qualname", code.co_name)
        data = _file_bytes(path)
        if data is not None:
            self._add_file(path, data)
        elif f"{path}:{qualname}" not in self.parts:  # no readable source: the bytecode
            self.parts[f"{path}:{qualname}"] = _code_fingerprint(code)

    def _add_module(self, module: types.ModuleType) -> None:
        if _is_versioned(module.__name__):
            return
        path = getattr(module, "__file__", None)
        if path and path.endswith(".py"):
            data = _file_bytes(path)
            if data is not None:
                self._add_file(path, data)

    def _add_file(self, path: str, data: bytes) -> None:
        """By name and content: the same file in another checkout gives the same part."""
        if path not in self.parts:
            digest = hashlib.blake2b(data, digest_size=20).hexdigest()
            self.parts[path] = f"{Path(path).name}:{digest}".encode()


def _code_fingerprint(code: types.CodeType) -> bytes:
    """Bytecode, constants and names; not the file name or line numbers."""
    h = hashlib.blake2b(code.co_code, digest_size=20)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            h.update(_code_fingerprint(const))
        elif isinstance(const, frozenset):  # its repr order depends on the hash seed
            h.update(repr(sorted(map(repr, const))).encode())
        else:
            h.update(repr(const).encode())
    return f"{getattr(code, 'co_qualname', code.co_name)}:{h.hexdigest()}".encode()


def _function_of(member: Any) -> Any:
    if isinstance(member, (staticmethod, classmethod)):
        return member.__func__
    if isinstance(member, property):
        return member.fget
    return member


def _names_used(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names_used(const)


_FILE_DIGESTS: dict[str, bytes | None] = {}


def _file_bytes(path: str) -> bytes | None:
    if path not in _FILE_DIGESTS:
        try:
            _FILE_DIGESTS[path] = Path(path).read_bytes() if not path.startswith("<") else None
        except OSError:
            _FILE_DIGESTS[path] = None
    return _FILE_DIGESTS[path]


# --------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Stored:
    """What :meth:`ExportCache.store` did: true when the entry was written."""

    stored: bool
    note: str | None

    def __bool__(self) -> bool:
        return self.stored


class ExportCache:
    """Entries under ``root``; every read is verified, every write is atomic; at most
    ``max_bytes`` kept (``None``: no cap), the least recently used evicted first."""

    def __init__(self, root: str | os.PathLike[str], max_bytes: int | None = None):
        self.root = Path(root)
        self.max_bytes = max_bytes

    def entry_dir(self, key: str) -> Path:
        return self.root / key[:2] / key

    def load(self, key: str, onnx_path: Path) -> ExportResult | None:
        """Links (else copies) a verified entry to ``onnx_path``; ``None`` (and the entry
        removed) if absent or damaged. Checksums are read once per entry: a later load
        compares each file's size, modification time and inode with what that check saw."""
        entry = self.entry_dir(key)
        if not entry.is_dir():
            return None
        try:
            manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
            files: dict[str, str] = manifest["files"]
            main = manifest["main"]
            if main not in files or FACTS not in files:
                raise ValueError("manifest without the ONNX file or the export facts")
            _verify(entry, files)
            facts = json.loads((entry / FACTS).read_text(encoding="utf-8"))
            result = ExportResult(**{k: v for k, v in facts.items() if k in _FIELDS})
        except (OSError, ValueError, KeyError, TypeError) as e:
            logger.warning("export cache entry %s is damaged (%s): discarded, exporting", key, e)
            self._discard(entry)
            return None
        try:
            onnx_path.parent.mkdir(parents=True, exist_ok=True)
            for name in files:
                if name in (FACTS,):
                    continue
                target = onnx_path if name == main else onnx_path.parent / name
                link_or_copy(entry / name, target)
            os.utime(entry / MANIFEST)  # last used: eviction keeps it longest
        except OSError as e:  # evicted meanwhile by a process that ignored the lock
            logger.warning("export cache entry %s unreadable (%s): exporting", key, e)
            return None
        result.onnx_path = str(onnx_path)
        result.cached = True
        return result

    def store(self, key: str, result: ExportResult) -> Stored:
        """Writes an entry for a successful export (the outcome is true when stored, with a
        note for the reader when something is worth saying). Never raises. An entry larger
        than the whole cap is still stored, alone: the cap then follows the largest model
        seen instead of refusing the models where a hit saves most (the note says so)."""
        if not result.ok or not result.onnx_path:
            return Stored(False, None)
        entry = self.entry_dir(key)
        tmp = entry.parent / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        note = None
        try:
            tmp.mkdir(parents=True)
            source = Path(result.onnx_path)
            names = [source.name, *_external_data_names(source)]
            for name in names:
                link_or_copy(source.parent / name, tmp / name)
            facts = dataclasses.asdict(result)
            facts.update(onnx_path=None, seconds=result.seconds, cached=False)
            (tmp / FACTS).write_text(json.dumps(facts), encoding="utf-8")
            files = {name: _file_digest(tmp / name) for name in [*names, FACTS]}
            manifest = {"key": key, "main": source.name, "files": files, "created": time.time()}
            (tmp / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
            _stamp(tmp, files)  # just hashed: the first load need not read them again
            size = _tree_size(tmp)
            if self.max_bytes is not None and size > self.max_bytes:
                note = (
                    f"export cache: this graph's entry ({size / MB:.0f} MB) is larger than the "
                    f"cache's cap ({self.max_bytes / MB:.0f} MB): stored alone, older entries "
                    "evicted; raise cache-max-mb to keep other models cached beside it"
                )
                logger.info("%s", note)
            if entry.exists():
                self._discard(entry)  # damaged (load refused it) or written meanwhile
            os.replace(tmp, entry)
        except OSError as e:
            logger.warning("export cache: cannot store %s: %s", key, e)
            return Stored(False, f"export cache: this graph was not stored ({e})")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.evict(keep=key)
        return Stored(True, note)

    def entries(self) -> list[tuple[float, int, str]]:
        """``(last used, bytes, key)`` of every entry, least recently used first."""
        found = []
        for group in _subdirs(self.root):
            for entry in _subdirs(group):
                if entry.name.startswith("."):
                    continue
                try:
                    used = (entry / MANIFEST).stat().st_mtime
                except OSError:
                    used = 0.0  # no manifest: damaged, the first to go
                found.append((used, _tree_size(entry), entry.name))
        return sorted(found)

    def evict(self, keep: str | None = None) -> list[str]:
        """Removes the least recently used entries until the cache fits ``max_bytes``;
        never ``keep`` nor an entry another process holds the lock of. Returns the keys
        removed. Temporary directories left by killed runs go too."""
        self._remove_stale_temporaries()
        if self.max_bytes is None:
            return []
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        evicted: list[str] = []
        for _, size, key in entries:
            if total <= self.max_bytes:
                break
            if key == keep:
                continue
            with self.lock(key, wait=False) as locked:
                if not locked:
                    continue  # in use by another run: the next eviction sees it again
                self._discard(self.entry_dir(key))
            total -= size
            evicted.append(key)
        if evicted:
            logger.info(
                "export cache: evicted %d least recently used entries to stay under %.0f MB",
                len(evicted),
                self.max_bytes / MB,
            )
        return evicted

    def _remove_stale_temporaries(self) -> None:
        deadline = time.time() - STALE_TEMP_SECONDS
        for group in _subdirs(self.root):
            for item in _subdirs(group):
                if item.name.startswith((".tmp-", ".trash-")):
                    with contextlib.suppress(OSError):
                        if item.stat().st_mtime < deadline:
                            shutil.rmtree(item, ignore_errors=True)

    def _discard(self, entry: Path) -> None:
        trash = entry.parent / f".trash-{entry.name}-{uuid.uuid4().hex[:8]}"
        with contextlib.suppress(OSError):
            os.replace(entry, trash)
        shutil.rmtree(trash, ignore_errors=True)

    @contextlib.contextmanager
    def lock(self, key: str, *, wait: bool = True) -> Iterator[bool]:
        """A per-key lock between processes (base and head); a no-op where unsupported.
        Yields whether the lock is held: with ``wait=False`` it is only tried once."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield True
            return
        path = self.root / key[:2] / f".{key}.lock"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(path, "a+b")  # noqa: SIM115 - held for the with-block
        except OSError:
            yield True
            return
        deadline = time.monotonic() + (LOCK_WAIT_SECONDS if wait else 0.0)
        locked = False
        try:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    locked = True
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.05)
            yield locked
        finally:
            if locked:
                fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()


_FIELDS = {f.name for f in dataclasses.fields(ExportResult)}


def _safe_name(name: str) -> str:
    if Path(name).name != name or name in ("", ".", ".."):
        raise ValueError(f"unexpected file name in manifest: {name!r}")
    return name


def _subdirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _tree_size(path: Path) -> int:
    """Bytes of the files directly in ``path`` (entries hold no subdirectories)."""
    total = 0
    with contextlib.suppress(OSError):
        for item in os.scandir(path):
            with contextlib.suppress(OSError):
                if item.is_file(follow_symlinks=False):
                    total += item.stat(follow_symlinks=False).st_size
    return total


VERIFIED = "verified.json"  # what the last full checksum check saw of each file


def _file_stat(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _stamp(entry: Path, files: dict[str, str]) -> None:
    stats = {name: _file_stat(entry / _safe_name(name)) for name in files}
    (entry / VERIFIED).write_text(json.dumps(stats), encoding="utf-8")


def _verify(entry: Path, files: dict[str, str]) -> None:
    """Raises ``ValueError`` when a file of the entry does not match its checksum. Files
    unchanged since the last full check (same size, modification time and inode) are not
    read again; a file written through a link to it changes its modification time."""
    try:
        seen = json.loads((entry / VERIFIED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        seen = {}
    checked = False
    for name, digest in files.items():
        path = entry / _safe_name(name)
        if isinstance(seen, dict) and seen.get(name) == _file_stat(path):
            continue
        if _file_digest(path) != digest:
            raise ValueError(f"checksum mismatch for {name}")
        checked = True
    if checked:
        with contextlib.suppress(OSError):
            _stamp(entry, files)


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link (no bytes copied: a 2 GB graph costs nothing) where the file system
    allows one, else a copy. The target is replaced, never written through."""
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _unlink_outputs(onnx_path: Path) -> None:
    """Removes an earlier run's graph (and its external data) at ``onnx_path``: it may be a
    link to a cache entry, which writing the new graph in place would damage."""
    for path in (onnx_path, *onnx_path.parent.glob(onnx_path.name + ".data*")):
        with contextlib.suppress(OSError):
            path.unlink()


def _file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=32)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _external_data_names(onnx_path: Path) -> list[str]:
    import onnx

    proto = onnx.load(str(onnx_path), load_external_data=False)
    names = {
        e.value
        for init in proto.graph.initializer
        for e in init.external_data
        if e.key == "location"
    }
    return sorted(n for n in names if Path(n).name == n and (onnx_path.parent / n).is_file())


# --------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------


def cached_export(
    export: Callable[[], ExportResult],
    key: Callable[[], str],
    onnx_path: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | None,
    max_bytes: int | None = DEFAULT_CACHE_MAX_MB * MB,
) -> ExportResult:
    """``export()`` through the cache in ``cache_dir`` (no cache when ``None``), kept
    under ``max_bytes`` (``None``: no cap).

    A key that cannot be computed, or a cache that cannot be written, only costs the
    saving: the export runs as without a cache.
    """
    if cache_dir is None:
        return export()
    begin = time.perf_counter()
    try:
        cache_key = key()
    except Exception as e:
        logger.warning("export cache: no key (%s: %s), exporting", type(e).__name__, e)
        return export()
    cache = ExportCache(cache_dir, max_bytes)
    onnx_path = Path(onnx_path)
    with cache.lock(cache_key):
        hit = cache.load(cache_key, onnx_path)
        if hit is not None:
            hit.seconds = time.perf_counter() - begin
            hit.cache_key = cache_key
            return hit
        _unlink_outputs(onnx_path)  # a file linked to an entry is replaced, never rewritten
        result = export()
        result.cache_key = cache_key
        note = cache.store(cache_key, result).note
        if note and result.ok:
            result.notes.append(note)
    return result
