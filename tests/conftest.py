"""Shared test settings. Result builders live in ``tests/support/builders.py``."""

from __future__ import annotations

from hypothesis import settings

# Property tests are reproducible (the same examples on every run, in CI and under mutation
# testing) and leave no example database in the work tree.
settings.register_profile("observer-ci", database=None, derandomize=True, deadline=None)
settings.load_profile("observer-ci")
