"""Shared test settings. Result builders live in ``tests/support/builders.py``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
import requests
from hypothesis import settings

from observer_ci.github.client import GitHubClient
from tests.support.fake_github import DEFAULT_TOKEN, FakeGitHub
from tests.support.logging_state import package_logger_kept

# Property tests are reproducible (the same examples on every run, in CI and under mutation
# testing) and leave no example database in the work tree.
settings.register_profile(
    "observer-ci", database=None, derandomize=True, deadline=None, max_examples=50
)
# tools/mutation.py reruns the tests once per mutant: fewer examples keep that affordable.
settings.register_profile("mutation", settings.get_profile("observer-ci"), max_examples=12)
settings.load_profile("observer-ci")


# -- a real local GitHub (tests/support/fake_github.py) and a client that never sleeps --------


class RecordingSleep:
    """A ``sleep`` that records the requested waits instead of sleeping."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    """A fake GitHub on a free loopback port, accepting ``DEFAULT_TOKEN``."""
    with FakeGitHub(token=DEFAULT_TOKEN) as server:
        yield server


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        s.trust_env = False  # never route loopback traffic through an environment proxy
        yield s


@pytest.fixture
def client(gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session) -> GitHubClient:
    """A client of ``gh`` with the default retry settings."""
    return GitHubClient(gh.url, DEFAULT_TOKEN, sleep=sleep, session=session, timeout_s=5)


@pytest.fixture
def log_lines(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    """The package logger's messages (it stops propagating once configured for the CLI)."""
    package = logging.getLogger("observer_ci")
    propagate, package.propagate = package.propagate, True
    caplog.set_level(logging.INFO, logger="observer_ci")
    yield lambda: [r.getMessage() for r in caplog.records if r.name.startswith("observer_ci")]
    package.propagate = propagate


@pytest.fixture(autouse=True)
def _package_logger_restored() -> Iterator[None]:
    """Whatever a test's in-process code configures on the package logger (``progress`` and
    the action call ``configure()``) is undone after it (module-scoped runs of the action
    undo it themselves: ``package_logger_kept`` in their helper)."""
    with package_logger_kept():
        yield


@pytest.fixture(scope="module", autouse=True)
def _package_logger_restored_per_module() -> Iterator[None]:
    """The same for module-scoped fixtures that run the pipeline (``quiet_pipeline`` calls
    ``configure()``): the next file in this worker finds the logger as this one found it."""
    with package_logger_kept():
        yield
