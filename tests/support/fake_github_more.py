"""The fake GitHub's history, check-run and accept endpoints (see :mod:`tests.support.fake_github`).

Shapes follow GitHub's REST description (API version 2022-11-28):

- ``GET   /repos/{o}/{r}/actions/runs`` (``branch``, ``event``, ``status``, ``head_sha``;
  ``{"total_count", "workflow_runs"}``, newest first)
- ``GET   /repos/{o}/{r}/actions/runs/{id}/artifacts`` (``name``; ``{"total_count", "artifacts"}``)
- ``GET   /repos/{o}/{r}/actions/artifacts/{id}/zip``: ``302`` with ``Location`` to a storage
  URL valid without credentials (here ``/_blob/{id}``; the request's ``Authorization`` is
  recorded in :attr:`MoreState.blob_auth`); ``410`` for an expired artifact
- ``GET   /repos/{o}/{r}/compare/{base}...{head}`` (``status``, ``ahead_by``, ``behind_by``,
  ``merge_base_commit``) and ``GET /repos/{o}/{r}/commits?sha=`` over :meth:`add_commits`
- ``POST  /repos/{o}/{r}/check-runs`` (201) and ``PATCH /repos/{o}/{r}/check-runs/{id}``: ``name``
  and ``head_sha`` required, ``conclusion`` required once ``completed``, ``output.summary`` at
  most 65535 characters, at most 50 ``annotations`` per request (appended), each with
  ``path``, ``start_line``, ``end_line``, ``annotation_level`` and ``message``: else 422
- ``GET   /repos/{o}/{r}/issues/{n}/labels`` and ``/issues/{n}/events`` (``labeled`` events)
- ``GET   /repos/{o}/{r}/collaborators/{user}/permission`` (``permission``: admin, write,
  read or none; users not seeded read)
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.fake_github import FakeGitHub, Reply

BLOB_PREFIX = "/_blob/"
CHECK_SUMMARY_MAX = 65535
MAX_ANNOTATIONS = 50
CONCLUSIONS = (
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "stale",
    "timed_out",
)
CHECK_STATUSES = ("queued", "in_progress", "completed")
LEVELS = ("notice", "warning", "failure")
ANNOTATION_KEYS = ("path", "start_line", "end_line", "annotation_level", "message")

_R = r"^/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
_RUNS = re.compile(_R + r"/actions/runs$")
_ARTIFACTS = re.compile(_R + r"/actions/runs/(?P<id>\d+)/artifacts$")
_ZIP = re.compile(_R + r"/actions/artifacts/(?P<id>\d+)/zip$")
_COMPARE = re.compile(_R + r"/compare/(?P<base>[^/.]+)\.\.\.(?P<head>[^/.]+)$")
_COMMITS = re.compile(_R + r"/commits$")
_CHECKS = re.compile(_R + r"/check-runs$")
_CHECK = re.compile(_R + r"/check-runs/(?P<id>\d+)$")
_LABELS = re.compile(_R + r"/issues/(?P<n>\d+)/labels$")
_EVENTS = re.compile(_R + r"/issues/(?P<n>\d+)/events$")
_PERMISSION = re.compile(_R + r"/collaborators/(?P<user>[^/]+)/permission$")


def _repo(match: re.Match[str]) -> tuple[str, str]:
    return match["owner"].lower(), match["repo"].lower()


class MoreState:
    """The seeded artifacts, commit graph, check runs, labels and permissions."""

    def __init__(self, fake: FakeGitHub) -> None:
        self.fake = fake
        self.artifacts: dict[tuple[str, str, int], list[dict]] = {}
        self.blobs: dict[int, bytes] = {}
        self.blob_auth: list[str | None] = []  # Authorization of each storage download
        self.parents: dict[tuple[str, str], dict[str, list[str]]] = {}
        self.check_runs: dict[tuple[str, str], list[dict]] = {}
        self.labels: dict[tuple[str, str, int], list[dict]] = {}
        self.events: dict[tuple[str, str, int], list[dict]] = {}
        self.permissions: dict[tuple[str, str], dict[str, str]] = {}
        self._next = 7_000_001

    # -- seeding (from tests) ------------------------------------------------------------

    def add_artifact(
        self,
        owner: str,
        repo: str,
        run_id: int,
        name: str,
        files: Mapping[str, bytes],
        *,
        expired: bool = False,
    ) -> dict:
        """An artifact of run ``run_id`` holding ``files`` (zipped, as upload-artifact does)."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for path, data in files.items():
                archive.writestr(path, data)
        with self.fake._lock:
            run = self.fake._runs.get((owner.lower(), repo.lower(), int(run_id)), {})
            artifact_id, self._next = self._next, self._next + 1
            base = f"{self.fake.url}/repos/{owner}/{repo}/actions/artifacts/{artifact_id}"
            artifact = {
                "id": artifact_id,
                "node_id": f"MDg6QXJ0aWZhY3Q{artifact_id}",
                "name": name,
                "size_in_bytes": len(buffer.getvalue()),
                "url": base,
                "archive_download_url": f"{base}/zip",
                "expired": expired,
                "created_at": self.fake._tick(),
                "workflow_run": {
                    "id": int(run_id),
                    "head_branch": run.get("head_branch", ""),
                    "head_sha": run.get("head_sha", ""),
                },
            }
            self.blobs[artifact_id] = buffer.getvalue()
            self.artifacts.setdefault((owner.lower(), repo.lower(), int(run_id)), []).append(
                artifact
            )
            return dict(artifact)

    def add_commits(self, owner: str, repo: str, chain: list[tuple[str, list[str]]]) -> None:
        """Commits and their parents, oldest first (the commits list walks them back)."""
        with self.fake._lock:
            graph = self.parents.setdefault((owner.lower(), repo.lower()), {})
            for sha, parents in chain:
                graph[sha] = list(parents)

    def add_label(self, owner: str, repo: str, number: int, name: str, actor: str) -> None:
        """Label issue ``number`` as ``actor`` would (a ``labeled`` issue event too)."""
        key = (owner.lower(), repo.lower(), int(number))
        with self.fake._lock:
            label_id, self._next = self._next, self._next + 1
            label = {"id": label_id, "name": name, "color": "ededed", "default": False}
            self.labels.setdefault(key, []).append(label)
            event = {
                "id": label_id,
                "event": "labeled",
                "actor": {"login": actor, "type": "User"},
                "label": {"name": name, "color": "ededed"},
                "created_at": self.fake._tick(),
            }
            self.events.setdefault(key, []).append(event)

    def set_permission(self, owner: str, repo: str, login: str, permission: str) -> None:
        with self.fake._lock:
            self.permissions.setdefault((owner.lower(), repo.lower()), {})[login] = permission

    def checks(self, owner: str, repo: str) -> list[dict]:
        """The check runs created, oldest first (with every annotation received)."""
        with self.fake._lock:
            return json.loads(json.dumps(self.check_runs.get((owner.lower(), repo.lower()), [])))

    # -- answers (called under the fake's lock) -------------------------------------------

    def blob(self, path: str, headers: Mapping[str, str]) -> Reply:
        from tests.support.fake_github import Reply, _error

        self.blob_auth.append(headers.get("Authorization"))
        data = self.blobs.get(int(path[len(BLOB_PREFIX) :].split("?")[0] or 0))
        return Reply(200, data) if data is not None else _error(404, "BlobNotFound")

    def ancestry(self, key: tuple[str, str], sha: str) -> list[str]:
        """``sha`` and its ancestors, newest first (breadth first over parents)."""
        graph, seen, queue = self.parents.get(key, {}), [], [sha]
        while queue:
            current = queue.pop(0)
            if current in seen or current not in graph:
                continue
            seen.append(current)
            queue.extend(graph[current])
        return seen


def route_more(
    fake: FakeGitHub, method: str, path: str, query: dict[str, str], data: bytes
) -> Reply | None:
    """The reply when ``path`` is one of this module's endpoints, else None."""
    state = fake.more
    if method == "GET":
        for pattern, answer in _GETS:
            if match := pattern.match(path):
                return answer(fake, state, match, path, query)
    if (match := _CHECKS.match(path)) and method == "POST":
        return _create_check(fake, state, match, data)
    if (match := _CHECK.match(path)) and method == "PATCH":
        return _update_check(state, match, data)
    return None


def _runs(fake, state, match, path, query) -> Reply:
    key = _repo(match)
    runs = [r for (o, r_, _), r in fake._runs.items() if (o, r_) == key]
    runs.reverse()  # newest first
    filters = {k: query[k] for k in ("branch", "event", "head_sha") if k in query}
    fields = {"branch": "head_branch"}
    runs = [r for r in runs if all(r.get(fields.get(k, k)) == v for k, v in filters.items())]
    if "status" in query:
        runs = [r for r in runs if query["status"] in (r.get("status"), r.get("conclusion"))]
    return fake.page(runs, path, query, wrap="workflow_runs")


def _artifacts(fake, state, match, path, query) -> Reply:
    items = state.artifacts.get((*_repo(match), int(match["id"])), [])
    if "name" in query:
        items = [a for a in items if a["name"] == query["name"]]
    return fake.page(items, path, query, wrap="artifacts")


def _zip(fake, state, match, path, query) -> Reply:
    from tests.support.fake_github import Reply, _error

    artifact_id = int(match["id"])
    for items in state.artifacts.values():
        for artifact in items:
            if artifact["id"] == artifact_id:
                if artifact["expired"]:
                    return _error(410, "Artifact has expired")
                location = f"{fake.url}{BLOB_PREFIX}{artifact_id}?sig=fake-signature"
                return Reply(302, None, {"Location": location})
    return _error(404, "Not Found")


def _commit(sha: str, parents: list[str]) -> dict:
    return {
        "sha": sha,
        "commit": {"message": f"commit {sha[:7]}"},
        "parents": [{"sha": p} for p in parents],
    }


def _commits(fake, state, match, path, query) -> Reply:
    from tests.support.fake_github import _error

    key = _repo(match)
    chain = state.ancestry(key, query.get("sha", ""))
    if not chain:
        return _error(404, "No commit found for SHA: " + query.get("sha", ""))
    graph = state.parents[key]
    return fake.page([_commit(s, graph[s]) for s in chain], path, query)


def _compare(fake, state, match, path, query) -> Reply:
    from tests.support.fake_github import Reply, _error

    key = _repo(match)
    base, head = state.ancestry(key, match["base"]), state.ancestry(key, match["head"])
    if not base or not head:
        return _error(404, "Not Found")
    ahead = [s for s in head if s not in base]
    behind = [s for s in base if s not in head]
    merge_base = next((s for s in head if s in base), None)
    status = (
        "identical"
        if not ahead and not behind
        else "ahead"
        if not behind
        else "behind"
        if not ahead
        else "diverged"
    )
    graph = state.parents[key]
    body = {
        "status": status,
        "ahead_by": len(ahead),
        "behind_by": len(behind),
        "total_commits": len(ahead),
        "merge_base_commit": _commit(merge_base, graph[merge_base]) if merge_base else None,
        "commits": [_commit(s, graph[s]) for s in reversed(ahead)],
    }
    return Reply(200, body)


def _labels(fake, state, match, path, query) -> Reply:
    return fake.page(state.labels.get((*_repo(match), int(match["n"])), []), path, query)


def _events(fake, state, match, path, query) -> Reply:
    return fake.page(state.events.get((*_repo(match), int(match["n"])), []), path, query)


def _permission(fake, state, match, path, query) -> Reply:
    from tests.support.fake_github import Reply

    user = match["user"]
    permission = state.permissions.get(_repo(match), {}).get(user, "read")
    role = {"admin": "admin", "write": "write", "read": "read"}.get(permission, "none")
    body = {"permission": permission, "role_name": role, "user": {"login": user}}
    return Reply(200, body)


_GETS = (
    (_RUNS, _runs),
    (_ARTIFACTS, _artifacts),
    (_ZIP, _zip),
    (_COMPARE, _compare),
    (_COMMITS, _commits),
    (_LABELS, _labels),
    (_EVENTS, _events),
    (_PERMISSION, _permission),
)


def _check_problem(body: Any, creating: bool) -> str | None:
    """Why GitHub would answer 422 to this check-run body, or None."""
    if not isinstance(body, dict):
        return "Invalid request"
    if creating and not all(
        isinstance(body.get(k), str) and body.get(k) for k in ("name", "head_sha")
    ):
        return "name and head_sha are required"
    if body.get("status", "queued") not in CHECK_STATUSES:
        return f"status is not included in the list: {body.get('status')!r}"
    conclusion = body.get("conclusion")
    if conclusion is not None and conclusion not in CONCLUSIONS:
        return f"conclusion is not included in the list: {conclusion!r}"
    if body.get("status") == "completed" and conclusion is None:
        return "conclusion is required when status is completed"
    output = body.get("output")
    if output is None:
        return None
    if not isinstance(output, dict) or not isinstance(output.get("title"), str):
        return "output.title and output.summary are required"
    if not isinstance(output.get("summary"), str):
        return "output.title and output.summary are required"
    if len(output["summary"]) > CHECK_SUMMARY_MAX:
        return f"output.summary is too long (maximum is {CHECK_SUMMARY_MAX} characters)"
    annotations = output.get("annotations") or []
    if len(annotations) > MAX_ANNOTATIONS:
        return f"at most {MAX_ANNOTATIONS} annotations per request"
    for item in annotations:
        if not isinstance(item, dict) or any(item.get(k) in (None, "") for k in ANNOTATION_KEYS):
            return f"an annotation needs {', '.join(ANNOTATION_KEYS)}"
        if item["annotation_level"] not in LEVELS:
            return f"annotation_level is not included in the list: {item['annotation_level']!r}"
    return None


def _parse(data: bytes) -> Any:
    try:
        return json.loads(data or b"null")
    except ValueError:
        return None


def _unprocessable(message: str) -> Reply:
    from tests.support.fake_github import Reply

    return Reply(422, {"message": "Validation Failed", "errors": [message]})


def _create_check(fake, state, match, data) -> Reply:
    from tests.support.fake_github import Reply

    body = _parse(data)
    problem = _check_problem(body, creating=True)
    if problem is not None:
        return _unprocessable(problem)
    check_id, state._next = state._next, state._next + 1
    owner, repo = _repo(match)
    run = {
        "id": check_id,
        "head_sha": body["head_sha"],
        "name": body["name"],
        "status": body.get("status", "queued"),
        "conclusion": body.get("conclusion"),
        "html_url": f"https://github.com/{owner}/{repo}/runs/{check_id}",
        "started_at": fake._tick(),
        "completed_at": None,
        "output": {"title": None, "summary": None, "text": None, "annotations_count": 0},
        "annotations": [],
        "updates": 0,
    }
    _apply(run, body, fake)
    state.check_runs.setdefault((owner, repo), []).append(run)
    return Reply(201, _public(run))


def _update_check(state, match, data) -> Reply:
    from tests.support.fake_github import Reply, _error

    body = _parse(data)
    problem = _check_problem(body, creating=False)
    if problem is not None:
        return _unprocessable(problem)
    for run in state.check_runs.get(_repo(match), []):
        if run["id"] == int(match["id"]):
            _apply(run, body, state.fake)
            run["updates"] += 1
            return Reply(200, _public(run))
    return _error(404, "Not Found")


def _apply(run: dict, body: dict, fake) -> None:
    for key in ("name", "status", "conclusion", "details_url", "external_id"):
        if key in body:
            run[key] = body[key]
    if run["conclusion"] is not None:
        run["status"] = "completed"
        run["completed_at"] = run["completed_at"] or fake._tick()
    output = body.get("output")
    if isinstance(output, dict):
        for key in ("title", "summary", "text"):
            if key in output:
                run["output"][key] = output[key]
        run["annotations"].extend(output.get("annotations") or [])
        run["output"]["annotations_count"] = len(run["annotations"])


def _public(run: dict) -> dict:
    return {k: v for k, v in run.items() if k not in ("annotations", "updates")}
