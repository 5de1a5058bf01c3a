"""Shared test helpers (see tests/README.md)."""

from pathlib import Path

# the repository root, whatever folder a test file lives in
REPO_ROOT = Path(__file__).resolve().parents[2]
