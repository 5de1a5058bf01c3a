"""Action settings, read once from the environment (``INPUT_*`` and ``GITHUB_*``)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field


class SettingsError(ValueError):
    """A missing or malformed action input."""


TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


def _bool(name: str, value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    v = value.strip().lower()
    if v in TRUE:
        return True
    if v in FALSE:
        return False
    raise SettingsError(f"input {name!r} must be true or false, got {value!r}")


@dataclass(frozen=True)
class Settings:
    """What the action does; every field has a matching ``action.yml`` input or GitHub variable."""

    scripts: list[str]
    install: str = ""
    baseline: str = ""  # "", a results.json path, or "base" to run the base commit
    thresholds: str = ""
    fail_on: str = "default"
    comment: bool = True
    token: str = field(default="", repr=False)
    out_dir: str = "observer-ci-out"
    dry_run: bool = False
    repeat: int = 10
    timeout_minutes: float = 60.0  # per run of the scripts (head, base) and for install
    github_api_url: str = "https://api.github.com"
    github_server_url: str = "https://github.com"
    repository: str = ""
    event_path: str = ""
    run_id: str = ""
    base_ref: str = ""
    workspace: str = "."
    step_summary: str = ""
    output_path: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, dry_run: bool = False) -> Settings:
        def get(name: str, default: str = "") -> str:
            return env.get(name, default) or default

        scripts = [s for s in shlex.split(get("INPUT_SCRIPT")) if s]
        if not scripts:
            raise SettingsError(
                "input 'script' is required: one or more observation scripts (globs allowed)"
            )
        repeat_text = get("INPUT_REPEAT", "10")
        try:
            repeat = int(repeat_text)
        except ValueError as e:
            raise SettingsError(f"input 'repeat' must be an integer, got {repeat_text!r}") from e
        timeout_text = get("INPUT_TIMEOUT_MINUTES", "60")
        try:
            timeout_minutes = float(timeout_text)
        except ValueError as e:
            raise SettingsError(
                f"input 'timeout_minutes' must be a number, got {timeout_text!r}"
            ) from e
        if not timeout_minutes > 0:
            raise SettingsError("input 'timeout_minutes' must be positive")
        return cls(
            scripts=scripts,
            timeout_minutes=timeout_minutes,
            install=get("INPUT_INSTALL").strip(),
            baseline=get("INPUT_BASELINE").strip(),
            thresholds=get("INPUT_THRESHOLDS"),
            fail_on=get("INPUT_FAIL_ON", "default"),
            comment=_bool("comment", env.get("INPUT_COMMENT"), True),
            token=get("INPUT_TOKEN") or get("GITHUB_TOKEN"),
            out_dir=get("INPUT_OUT", "observer-ci-out"),
            dry_run=dry_run or _bool("dry_run", env.get("INPUT_DRY_RUN"), False),
            repeat=max(1, repeat),
            github_api_url=get("GITHUB_API_URL", "https://api.github.com").rstrip("/"),
            github_server_url=get("GITHUB_SERVER_URL", "https://github.com").rstrip("/"),
            repository=get("GITHUB_REPOSITORY"),
            event_path=get("GITHUB_EVENT_PATH"),
            run_id=get("GITHUB_RUN_ID"),
            base_ref=get("GITHUB_BASE_REF"),
            workspace=get("GITHUB_WORKSPACE", "."),
            step_summary=get("GITHUB_STEP_SUMMARY"),
            output_path=get("GITHUB_OUTPUT"),
        )

    @property
    def run_url(self) -> str | None:
        if self.repository and self.run_id:
            return f"{self.github_server_url}/{self.repository}/actions/runs/{self.run_id}"
        return None
