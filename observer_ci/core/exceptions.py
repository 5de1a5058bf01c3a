"""Every exception class of observer-ci, in one place (torch-free).

Each is also importable from the module that raises it (``observer_ci.ObserverError``,
``observer_ci.github.client.GitHubError``, ...). Errors are data: each one ends up as a
result row, a warning, a step output or a usage error (exit 2), never as a lost result.
"""

from __future__ import annotations

from observer_ci.core.constants import COMMENT_REJECTED

# -- the observer and the child's pipeline ----------------------------------------------


class ObserverError(ValueError, RuntimeError):
    """The observed calls cannot be turned into one export signature.

    A ``ValueError`` (what this project raised first) and a ``RuntimeError`` (what the
    reference observers raise), so either ``except`` catches it.
    """


class FeedError(ValueError):
    """The observed inputs cannot be matched with the ONNX model's inputs."""


class MergeError(ValueError):
    """The two graphs cannot be one ``If``: the reason says which part disagrees."""


# -- usage: bad arguments, inputs, files --------------------------------------------------


class UsageError(Exception):
    """Bad arguments or unreadable files: exit 2 with a clear message."""


class ScriptPathError(UsageError, ValueError):
    """An observation script path or glob that names no readable file (``core/script_paths``)."""


class RunOptionsError(ValueError):
    """A run option of the wrong type or out of range (a usage error: exit 2)."""


class SettingsError(ValueError):
    """A missing or malformed action input."""


class ResultsSchemaError(ValueError):
    """A results.json field is missing or of the wrong type (the strict reader)."""


# -- the publishing job: untrusted payloads ------------------------------------------------


class ArtifactError(ValueError):
    """The payload is missing, too large, malformed or inconsistent: nothing is posted."""


class NoPayloadError(ArtifactError):
    """No ``payload.json`` at all (the pull-request job did not get that far)."""


class Rejected(Exception):
    """The payload must not be posted; ``status`` is the ``comment_status`` output."""

    def __init__(self, message: str, status: str = COMMENT_REJECTED) -> None:
        super().__init__(message)
        self.status = status


# -- GitHub ---------------------------------------------------------------------------------


class GitHubError(Exception):
    """A GitHub API call failed (HTTP error, exhausted retries or connection error)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        method: str | None = None,
        url: str | None = None,
        ambiguous: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.method = method
        self.url = url
        # True when a non-idempotent call may or may not have taken effect (5xx, lost
        # connection): the caller decides how to retry without duplicating.
        self.ambiguous = ambiguous
        # Set when GitHub said "rate limited": seconds it asked us to wait, and when
        # (epoch seconds) the limit resets, if it said so.
        self.retry_after_s: float | None = None
        self.rate_limit_reset: float | None = None

    @property
    def rate_limited(self) -> bool:
        """A refusal because of a rate limit (not a missing permission)."""
        if self.status == 429 or self.retry_after_s is not None:
            return True
        return self.status == 403 and "rate limit" in self.message.lower()

    def __str__(self) -> str:
        where = " ".join(part for part in (self.method, self.url) if part)
        status = f"HTTP {self.status}" if self.status is not None else "no response"
        return f"{where} -> {status}: {self.message}" if where else f"{status}: {self.message}"
