"""The default branch's history in the action: recorded on push, read back on a pull request.

Storage is the workflow artifacts of earlier default-branch runs (README, "History"): a push
to the default branch copies its ``results.json`` to ``<out>/history/`` (output
``history_path``; the composite action uploads it as the artifact :data:`HISTORY_ARTIFACT`,
kept ``retention-days`` days). ``baseline: history`` (or ``history+base``) lists the
default branch's successful push runs through the REST API (``actions: read``), anchors on
the pull request's base commit, else its nearest ancestor that has a run (the commits
list), downloads the last ``history_runs`` runs' artifacts (at most
:data:`~observer_ci.action.settings.MAX_HISTORY_RUNS`) into a directory and reads it as
``--baseline history:DIR`` does (:mod:`observer_ci.report.history`). ``history:DIR`` reads a
directory already there. Every problem is a note; the run goes on without a history.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from observer_ci.action.artifact import MAX_RESULTS_BYTES
from observer_ci.action.settings import Settings
from observer_ci.core.logs import logger
from observer_ci.core.results import RunResults
from observer_ci.core.runner import this_runner
from observer_ci.github.client import GitHubClient, GitHubError
from observer_ci.github.sticky import repo_from_env
from observer_ci.report.history import HISTORY_PREFIX, History, read_history

HISTORY_ARTIFACT = "observer-ci-history"
HISTORY = "history"
HISTORY_AND_BASE = "history+base"
RESULTS = "results.json"
SCANNED_RUNS = 300  # runs listed at most while looking for ones with an artifact


def wants_history(settings: Settings) -> bool:
    """``baseline: history``, ``history+base`` or ``history:DIR``."""
    return settings.baseline in (HISTORY, HISTORY_AND_BASE) or settings.baseline.startswith(
        HISTORY_PREFIX
    )


def workspace_settings(settings: Settings) -> Settings:
    """What the workspace runs: no base for ``history``, the base commit for ``history+base``."""
    if not wants_history(settings):
        return settings
    return dataclasses.replace(
        settings, baseline="base" if settings.baseline == HISTORY_AND_BASE else ""
    )


def is_default_branch_push(settings: Settings) -> bool:
    branch = settings.event.default_branch
    return settings.event_name == "push" and bool(branch) and settings.ref == f"refs/heads/{branch}"


def record_history(settings: Settings, head: RunResults) -> Path | None:
    """On a push to the default branch: ``<out>/history/results.json``, this run's entry of
    the history (the workflow uploads that folder); else None."""
    if not is_default_branch_push(settings):
        return None
    folder = Path(settings.out_dir) / "history"
    folder.mkdir(parents=True, exist_ok=True)
    head.write(folder / RESULTS)
    logger.info("history: this run's results recorded in %s", folder)
    return folder


def load_history(
    settings: Settings,
    client: Callable[[Settings], GitHubClient],
    out: Path,
    notes: list[str],
) -> History | None:
    """The history to compare with (see the module docstring), or None: no history baseline,
    or (with a note why) none found. ``client(settings)`` builds the client when needed."""
    if not wants_history(settings):
        return None
    if settings.baseline.startswith(HISTORY_PREFIX):
        folder: Path | None = Path(settings.baseline[len(HISTORY_PREFIX) :])
    elif not settings.token or settings.dry_run:
        notes.append("baseline history: no token (or a dry run), so no history was fetched")
        return None
    else:
        folder = fetch_history(settings, client(settings), out / "history-in", notes)
    if folder is None:
        return None
    try:
        history = read_history(folder, last=settings.history_runs, runner=this_runner())
    except ValueError as e:
        notes.append(f"baseline history: {e}")
        return None
    notes.extend(history.notes)
    if not history.runs:
        notes.append(f"baseline history: no readable results.json under {folder}")
        return None
    history.runs[-1].label = settings.event.default_branch or HISTORY  # the report's "base"
    return history


def fetch_history(
    settings: Settings, client: GitHubClient, dest: Path, notes: list[str]
) -> Path | None:
    """Downloads the last ``history_runs`` default-branch runs' results into ``dest``."""
    try:
        owner, repo = repo_from_env(settings.repository)
    except ValueError as e:
        notes.append(f"baseline history: {e}")
        return None
    branch = settings.event.default_branch or settings.base_ref
    if not branch:
        notes.append("baseline history: the default branch is unknown (no repository in event)")
        return None
    try:
        runs = _push_runs(client, owner, repo, branch)
        runs = _up_to_anchor(client, owner, repo, runs, settings.event.base_sha, notes)
        fetched = _download(client, owner, repo, runs, dest, settings.history_runs)
    except GitHubError as e:
        notes.append(
            f"baseline history could not be read from the API ({e}); the job needs "
            "permissions: actions: read"
        )
        return None
    if not fetched:
        notes.append(
            f"baseline history: no {HISTORY_ARTIFACT!r} artifact on the last runs of {branch} "
            "(a push to it records one)"
        )
        return None
    logger.info("history: %d run(s) of %s fetched into %s", fetched, branch, dest)
    return dest


def _push_runs(client: GitHubClient, owner: str, repo: str, branch: str) -> list[dict]:
    """The default branch's successful push runs, newest first (at most SCANNED_RUNS)."""
    found = []
    for run in client.workflow_runs(owner, repo, branch=branch, event="push", status="success"):
        found.append(run)
        if len(found) >= SCANNED_RUNS:
            break
    return found


def _up_to_anchor(
    client: GitHubClient,
    owner: str,
    repo: str,
    runs: list[dict],
    base_sha: str | None,
    notes: list[str],
) -> list[dict]:
    """The runs from the base commit's (else its nearest ancestor's) newest run back."""
    if not base_sha or not runs:
        return runs
    shas = [str(run.get("head_sha") or "") for run in runs]
    anchor = base_sha if base_sha in shas else None
    if anchor is None:
        ancestors = client.ancestors(owner, repo, base_sha)
        anchor = next((sha for sha in ancestors if sha in shas), None)
        if anchor is None:
            notes.append(
                f"baseline history: no run of the base commit {base_sha[:12]} or of its last "
                f"{len(ancestors)} ancestors; the newest runs are used"
            )
            return runs
        notes.append(
            f"baseline history: the base commit {base_sha[:12]} has no run; its nearest "
            f"ancestor with one is {anchor[:12]}"
        )
    return runs[shas.index(anchor) :]


def _download(
    client: GitHubClient, owner: str, repo: str, runs: list[dict], dest: Path, limit: int
) -> int:
    """Each run's history artifact's results.json into ``dest/<run id>/``; how many."""
    shutil.rmtree(dest, ignore_errors=True)
    fetched = 0
    for run in runs:
        if fetched >= limit:
            break
        artifact = _artifact(client, owner, repo, run)
        if artifact is None:
            continue
        data = _results_from_zip(client.download_artifact(owner, repo, int(artifact["id"])))
        if data is None:
            logger.warning("history: run %s's artifact holds no usable %s", run.get("id"), RESULTS)
            continue
        folder = dest / str(int(run["id"]))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / RESULTS).write_bytes(data)
        fetched += 1
    return fetched


def _artifact(client: GitHubClient, owner: str, repo: str, run: dict) -> dict[str, Any] | None:
    run_id = run.get("id")
    if not isinstance(run_id, int):
        return None
    for artifact in client.run_artifacts(owner, repo, run_id, HISTORY_ARTIFACT):
        if artifact.get("name") == HISTORY_ARTIFACT and not artifact.get("expired"):
            return artifact
    return None


def _results_from_zip(blob: bytes) -> bytes | None:
    """The archive's ``results.json`` (at its top), size-checked before it is read."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            info = next((i for i in archive.infolist() if i.filename == RESULTS), None)
            if info is None or info.file_size > MAX_RESULTS_BYTES:
                return None
            return archive.read(info)
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
