"""Expected size of the action's image, derived from what is installed on this machine.

No Docker engine here, so the image is sized from its parts: the Python packages the
Dockerfile installs (observer-ci[transformers] and the closure of its requirements, with the
CPU torch; this machine has exactly that set installed), the Debian packages it adds (git,
make and what they pull into python:3.11-slim), and the base image. ``--compress`` also
gzips the installed package files the way a layer is compressed (takes a minute).

    python benchmarks/image_size.py [--compress]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata as metadata
import os
import re
import subprocess
import tarfile

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOTS = ("observer-ci",)
EXTRAS = ("transformers",)
# git's and make's Debian packages missing from python:3.11-slim (bookworm): perl and curl.
APT_PACKAGES = (
    "git",
    "git-man",
    "make",
    "perl",
    "perl-modules-5.36",
    "libperl5.36",
    "liberror-perl",
    "libcurl3-gnutls",
    "libexpat1",
    "libgdbm6",
    "libgdbm-compat4",
    "libpcre2-8-0",
    "libnghttp2-14",
    "libpsl5",
    "librtmp1",
    "libssh2-1",
    "libldap-2.5-0",
    "libsasl2-2",
    "libbrotli1",
)
BASE_IMAGE_BYTES = 130e6  # python:3.11-slim (bookworm) unpacked, as registries list it


def closure(roots=ROOTS, extras=EXTRAS) -> dict[str, metadata.Distribution]:
    """Installed distributions needed by ``roots[extras]``, by normalised name."""
    env = default_environment()
    found: dict[str, metadata.Distribution] = {}

    def walk(name: str, wanted: tuple[str, ...]) -> None:
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in found:
            return
        dist = metadata.distribution(name)
        found[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or any(
                req.marker.evaluate({**env, "extra": e}) for e in ("", *wanted)
            ):
                walk(req.name, tuple(req.extras))

    for root in roots:
        walk(root, extras)
    return found


def installed_bytes(dist: metadata.Distribution) -> int:
    total = 0
    for f in dist.files or []:
        try:
            total += os.path.getsize(dist.locate_file(f))
        except OSError:
            pass
    return total


def apt_installed_bytes(packages=APT_PACKAGES) -> int | None:
    try:
        text = subprocess.run(
            ["apt-cache", "show", "--no-all-versions", *packages],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return sum(int(k) * 1024 for k in re.findall(r"^Installed-Size: (\d+)", text, re.M))


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def write(self, data: bytes) -> int:
        self.n += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def gzip_bytes(dists) -> int:
    """Size of a gzip-compressed tar of the distributions' files (like a layer)."""
    counter = _Counter()
    with (
        gzip.GzipFile(fileobj=counter, mode="wb", compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w|") as tar,
    ):
        for dist in dists:
            for f in dist.files or []:
                path = str(dist.locate_file(f))
                if os.path.isfile(path):
                    tar.add(path, recursive=False)
    return counter.n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compress", action="store_true", help="also gzip the package files")
    args = parser.parse_args()
    dists = closure()
    sizes = sorted(((installed_bytes(d), k) for k, d in dists.items()), reverse=True)
    packages = sum(s for s, _ in sizes)
    print(f"python packages: {len(sizes)} distributions, {packages / 1e9:.2f} GB installed")
    for size, name in sizes[:8]:
        print(f"  {name:<16} {size / 1e6:8.1f} MB  {dists[name].version}")
    apt = apt_installed_bytes()
    apt_text = f"{apt / 1e9:.2f} GB" if apt is not None else "unknown (no apt-cache)"
    print(f"git, make and their Debian packages: {apt_text}")
    print(f"python:3.11-slim base: {BASE_IMAGE_BYTES / 1e9:.2f} GB (assumed)")
    total = packages + (apt or 0) + BASE_IMAGE_BYTES
    print(f"expected image: {total / 1e9:.2f} GB unpacked")
    if args.compress:
        packed = gzip_bytes(dists.values())
        print(f"python packages gzip-compressed (layer size): {packed / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
