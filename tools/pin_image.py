"""Pin the Docker action's image by digest (run by .github/workflows/release.yml).

``python tools/pin_image.py action.yml docker://ghcr.io/OWNER/observer-ci@sha256:<64 hex>``
rewrites the one ``image:`` line under ``runs:`` in place and keeps every other byte of the
file (plain text: the release runner needs no YAML library; tests/unit/test_release.py parses
the result). The release workflow then commits it on top of the release tag and moves the tag
and the major tag there: whoever uses the action by tag or by commit runs an immutable image.

``python tools/pin_image.py --tag v1.2.3`` checks a release tag against the package's one
version (``observer_ci/__init__.py``) and prints the major tag (``v1``).

Exit status 2 on a usage mistake (a reference without a digest, a tag that does not match).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION_FILE = ROOT / "observer_ci" / "__init__.py"
PINNED_RE = re.compile(r"docker://[a-z0-9][a-z0-9./_-]*/observer-ci@sha256:[0-9a-f]{64}")
IMAGE_LINE_RE = re.compile(r"^(  image:[ \t]*)(\S+)([ \t]*(?:#.*)?)$", re.M)
TAG_RE = re.compile(r"v(\d+)\.(\d+)\.(\d+)")


class UsageError(Exception):
    """A reference or tag the release must not go on with."""


def package_version(path: Path = VERSION_FILE) -> str:
    """``__version__`` of the package, read without importing it."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            return str(ast.literal_eval(node.value))
    raise UsageError(f"no __version__ in {path}")


def major_tag(tag: str, version: str) -> str:
    """The moving major tag of a release tag, which must name the package's version."""
    match = TAG_RE.fullmatch(tag)
    if match is None:
        raise UsageError(f"release tag {tag!r} is not vMAJOR.MINOR.PATCH")
    if tag != f"v{version}":
        raise UsageError(
            f"release tag {tag} does not match the package version {version}: set "
            f"__version__ in observer_ci/__init__.py to {tag[1:]} (and the changelog), then tag"
        )
    return f"v{match.group(1)}"


def pin_text(text: str, reference: str) -> str:
    """``text`` (an action.yml) with its image replaced by ``reference``, a digest."""
    if not PINNED_RE.fullmatch(reference):
        raise UsageError(
            f"{reference!r} is not docker://<registry>/<owner>/observer-ci@sha256:<64 hex>"
        )
    matches = list(IMAGE_LINE_RE.finditer(text))
    runs = re.search(r"^runs:[ \t]*$", text, re.M)
    if len(matches) != 1 or runs is None or matches[0].start() < runs.end():
        raise UsageError(f"expected one '  image:' line under runs:, found {len(matches)}")
    (match,) = matches
    pinned = text[: match.start(2)] + reference + text[match.end(2) :]
    return pinned


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", help="check a release tag vX.Y.Z, print its major tag")
    parser.add_argument("action_yml", nargs="?", type=Path)
    parser.add_argument("reference", nargs="?", help="docker://...@sha256:<digest>")
    args = parser.parse_args(argv)
    try:
        if args.tag:
            print(major_tag(args.tag, package_version()))
            return 0
        if args.action_yml is None or args.reference is None:
            parser.error("give ACTION_YML and REFERENCE, or --tag TAG")
        path: Path = args.action_yml
        path.write_text(pin_text(path.read_text(encoding="utf-8"), args.reference))
        print(f"{path}: image {args.reference}")
        return 0
    except UsageError as exc:
        print(f"pin_image: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
