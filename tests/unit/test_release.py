"""The release: the workflow pushes the image with SBOM and provenance, attests it, and pins
action.yml to the pushed digest on the release tag (tools/pin_image.py, run here on a copy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from observer_ci import __version__
from tests.support import REPO_ROOT

ROOT = REPO_ROOT
DIGEST = "sha256:" + "0123456789abcdef" * 4
PINNED = f"docker://ghcr.io/observer-ci/observer-ci@{DIGEST}"
PUSHED = "${{ steps.release.outputs.image }}@${{ steps.push.outputs.digest }}"
sys.path.insert(0, str(ROOT / "tools"))
import pin_image  # noqa: E402


def release() -> dict:
    data = yaml.safe_load((ROOT / ".github/workflows/release.yml").read_text())
    data["on"] = data.pop(True)  # YAML 1.1 reads the key `on` as True
    return data


def step(steps: list[dict], *, uses: str = "", run: str = "") -> tuple[int, dict]:
    (found,) = [
        (i, s)
        for i, s in enumerate(steps)
        if (uses and s.get("uses", "").startswith(uses + "@")) or (run and run in s.get("run", ""))
    ]
    return found


def test_pull_requests_build_and_smoke_test_without_any_write_permission():
    flow = release()
    assert flow["on"]["push"] == {"tags": ["v*.*.*"]}
    assert "tools/pin_image.py" in flow["on"]["pull_request"]["paths"]
    assert flow["permissions"] == {}
    image = flow["jobs"]["image"]
    assert image["permissions"] == {"contents": "read"} and "if" not in image
    _, build = step(image["steps"], uses="docker/build-push-action")
    assert build["with"]["load"] is True and "push" not in build["with"]
    step(image["steps"], run="tools/smoke_image.sh observer-ci:smoke")


def test_the_tag_pushes_attests_and_pins_the_digest_in_that_order():
    publish = release()["jobs"]["publish"]
    assert publish["needs"] == "image" and publish["if"] == "startsWith(github.ref, 'refs/tags/v')"
    assert publish["concurrency"] == {"group": "release-publish", "cancel-in-progress": False}
    assert publish["permissions"] == {
        "contents": "write",
        "packages": "write",
        "id-token": "write",
        "attestations": "write",
    }
    steps = publish["steps"]
    i_check, check = step(steps, run="tools/pin_image.py --tag")
    i_push, push = step(steps, uses="docker/build-push-action")
    assert push["id"] == "push" and push["with"]["push"] is True
    assert push["with"]["sbom"] is True and push["with"]["provenance"] == "mode=max"
    assert "cache-from" not in push["with"]  # the published image is built from scratch
    i_smoke, smoke = step(steps, run="tools/smoke_image.sh")
    assert smoke["env"]["IMAGE_REF"] == PUSHED
    i_prov, prov = step(steps, uses="actions/attest-build-provenance")
    i_sbom, sbom = step(steps, uses="actions/attest-sbom")
    for attest in (prov, sbom):
        assert attest["with"]["subject-digest"] == "${{ steps.push.outputs.digest }}"
        assert attest["with"]["push-to-registry"] is True
    i_verify, verify = step(steps, run="gh attestation verify")
    i_pin, pin = step(steps, run="tools/pin_image.py action.yml")
    assert i_check < i_push < i_smoke < i_prov < i_sbom < i_verify < i_pin == len(steps) - 1
    assert pin["env"]["IMAGE_REF"] == PUSHED
    script = pin["run"]
    assert 'python3 tools/pin_image.py action.yml "docker://$IMAGE_REF"' in script
    assert 'git tag --force --annotate "$TAG"' in script and 'git tag --force "$MAJOR"' in script
    assert 'push --force origin "refs/tags/$TAG" "refs/tags/$MAJOR"' in script


def test_the_documented_verify_command_is_the_one_the_release_runs():
    (_, verify) = step(release()["jobs"]["publish"]["steps"], run="gh attestation verify")
    spdx = "--predicate-type https://spdx.dev/Document/v2.3"
    assert spdx in verify["run"].replace("\\\n            ", "")
    for doc in ("README.md", "SECURITY.md"):
        text = (ROOT / doc).read_text()
        assert 'gh attestation verify "oci://$image" --owner observer-ci\n' in text, doc
        assert f'gh attestation verify "oci://$image" --owner observer-ci {spdx}' in text, doc


def test_checkouts_keep_no_credentials_and_the_token_reaches_git_by_header_only():
    for job in release()["jobs"].values():
        (_, checkout) = step(job["steps"], uses="actions/checkout")
        assert checkout["with"]["persist-credentials"] is False
    (_, pin) = step(release()["jobs"]["publish"]["steps"], run="tools/pin_image.py action.yml")
    assert pin["env"]["GH_TOKEN"] == "${{ github.token }}"
    assert "${{" not in pin["run"]  # values reach the script as variables, never as code


def test_pin_image_rewrites_only_the_image_line_of_a_copy_of_action_yml(tmp_path):
    copy = tmp_path / "action.yml"
    shutil.copy(ROOT / "action.yml", copy)
    before = copy.read_text()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/pin_image.py"), str(copy), PINNED],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    after = copy.read_text()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    moving = "  image: docker://ghcr.io/observer-ci/observer-ci:v1"
    assert changed == [(moving, f"  image: {PINNED}")]
    original, pinned = yaml.safe_load(before), yaml.safe_load(after)
    assert pinned["runs"] == {"using": "docker", "image": PINNED}
    assert {**pinned, "runs": None} == {**original, "runs": None}
    # pinned again (a re-run of the release job): the new digest replaces the old one
    again = pin_image.pin_text(after, PINNED.replace("0123", "4567"))
    assert yaml.safe_load(again)["runs"]["image"] == PINNED.replace("0123", "4567")


@pytest.mark.parametrize(
    "reference",
    [
        "docker://ghcr.io/observer-ci/observer-ci:v1",  # a moving tag, not a digest
        "ghcr.io/observer-ci/observer-ci@" + DIGEST,  # no docker:// scheme
        "docker://ghcr.io/observer-ci/other@" + DIGEST,  # another image
        "docker://ghcr.io/observer-ci/observer-ci@sha256:abc",  # a short digest
        PINNED + "\n  using: node20",  # an injected line
    ],
)
def test_pin_image_refuses_what_is_not_an_observer_ci_digest(reference, tmp_path):
    copy = tmp_path / "action.yml"
    shutil.copy(ROOT / "action.yml", copy)
    assert pin_image.main([str(copy), reference]) == 2
    assert copy.read_text() == (ROOT / "action.yml").read_text()


def test_pin_image_refuses_a_file_without_one_image_line_under_runs():
    with pytest.raises(pin_image.UsageError, match="found 0"):
        pin_image.pin_text("name: x\nruns:\n  using: composite\n", PINNED)
    with pytest.raises(pin_image.UsageError, match="under runs"):
        pin_image.pin_text(f"  image: {PINNED}\nruns:\n  using: docker\n", PINNED)


def test_the_release_tag_must_name_the_package_version():
    assert pin_image.package_version() == __version__
    major = __version__.split(".")[0]
    assert pin_image.major_tag(f"v{__version__}", __version__) == f"v{major}"
    assert pin_image.major_tag("v1.2.3", "1.2.3") == "v1"
    for tag in ("v1.2.4", "1.2.3", "v1.2", "v1.2.3-rc1"):
        with pytest.raises(pin_image.UsageError):
            pin_image.major_tag(tag, "1.2.3")


def git(*args: str, cwd) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_the_pin_step_moves_the_release_tag_and_the_major_tag_to_the_pinned_commit(tmp_path):
    """The release job's own script, run by bash on a clone whose origin is a local bare
    repository: both tags end on one new commit, on top of the tagged one, changing only
    action.yml's image."""
    (_, pin) = step(release()["jobs"]["publish"]["steps"], run="tools/pin_image.py action.yml")
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    git("init", "--quiet", "--bare", str(origin), cwd=tmp_path)
    git("init", "--quiet", str(work), cwd=tmp_path)
    (work / "tools").mkdir()
    shutil.copy(ROOT / "action.yml", work / "action.yml")
    shutil.copy(ROOT / "tools" / "pin_image.py", work / "tools" / "pin_image.py")
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    git("add", "-A", cwd=work)
    git(*identity, "commit", "--quiet", "-m", "release 1.2.3", cwd=work)
    tagged = git("rev-parse", "HEAD", cwd=work)
    git("tag", "v1.2.3", cwd=work)
    git("tag", "v1", cwd=work)
    git("remote", "add", "origin", str(origin), cwd=work)
    git("push", "--quiet", "origin", "--tags", cwd=work)
    git("checkout", "--quiet", "--detach", "v1.2.3", cwd=work)  # as actions/checkout leaves it
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GH_TOKEN": "not-a-token",
        "TAG": "v1.2.3",
        "MAJOR": "v1",
        "IMAGE_REF": PINNED.removeprefix("docker://"),
    }
    proc = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", pin["run"]],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    release_commit = git("rev-parse", "v1.2.3^{commit}", cwd=origin)
    assert git("rev-parse", "v1^{commit}", cwd=origin) == release_commit != tagged
    assert git("rev-parse", f"{release_commit}^", cwd=origin) == tagged
    assert git("diff", "--name-only", tagged, release_commit, cwd=origin) == "action.yml"
    pinned = yaml.safe_load(git("show", f"{release_commit}:action.yml", cwd=origin))
    assert pinned["runs"]["image"] == PINNED
    message = git("tag", "-l", "--format=%(contents)", "v1.2.3", cwd=origin)
    assert PINNED.removeprefix("docker://") in message


def test_every_release_script_is_valid_bash():
    scripts = [s["run"] for job in release()["jobs"].values() for s in job["steps"] if "run" in s]
    scripts.append((ROOT / "tools" / "smoke_image.sh").read_text())
    for script in scripts:
        syntax = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr
