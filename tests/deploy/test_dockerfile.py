"""The Dockerfile, checked statically (no image is built here: CI has no Docker engine).

Parsed into stages of (instruction, arguments); the rules are the ones the image promises:
a pinned base, a multi-stage build whose final stage holds no build tools, a fixed non-root
user that is the Deployment's, `lease-worker` as the entrypoint, and no secrets.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from tests.deploy.kit import BASE, ROOT, config_data, pod_spec, rendered, worker_container

Instruction = tuple[str, str]

DOCKERFILE = ROOT / "Dockerfile"
PINNED = re.compile(r"^[\w./-]+:\d+\.\d+\.\d+[\w.-]*(@sha256:[0-9a-f]{64})?$")
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|cc|make|build-essential|apt-get|apt|curl|wget)\b")
SECRET_NAMES = re.compile(r"(KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)


def parse(text: str) -> list[list[Instruction]]:
    """Stages of (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    stages: list[list[Instruction]] = []
    for line in joined.splitlines():
        if not line.strip():
            continue
        keyword, _, arguments = line.strip().partition(" ")
        if keyword.upper() == "FROM":
            stages.append([])
        if not stages:
            raise ValueError(f"{keyword} before the first FROM")
        stages[-1].append((keyword.upper(), " ".join(arguments.split())))
    return stages


def _stages() -> list[list[Instruction]]:
    return parse(DOCKERFILE.read_text())


def _all(stage: list[Instruction], keyword: str) -> list[str]:
    return [arguments for instruction, arguments in stage if instruction == keyword]


def test_the_build_has_a_build_stage_and_a_final_stage_on_one_pinned_base() -> None:
    stages = _stages()
    assert len(stages) == 2
    images = [_all(stage, "FROM")[0].split(" AS ")[0] for stage in stages]
    for image in images:
        assert PINNED.match(image), f"{image}: pin the base image by its full version"
    # The final stage runs the build stage's virtualenv: same interpreter, same path.
    assert images[0] == images[1]
    assert images[0].startswith("python:3.11.")


def test_the_final_stage_runs_as_the_deployments_non_root_user() -> None:
    final = _stages()[-1]
    (user,) = _all(final, "USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit(), "a numeric user lets runAsNonRoot check it"
    assert int(uid) > 0 and int(gid) > 0
    context = pod_spec(rendered(BASE))["securityContext"]
    assert (int(uid), int(gid)) == (context["runAsUser"], context["runAsGroup"])
    # The user is created with these IDs, not left to the next free number.
    assert any(f"--uid {uid}" in run and f"--gid {gid}" in run for run in _all(final, "RUN"))


def test_the_final_stage_holds_no_build_tools_and_fetches_nothing() -> None:
    stages = _stages()
    final = stages[-1]
    for run in _all(final, "RUN"):
        assert not BUILD_TOOLS.search(run), run
    for copy in _all(final, "COPY"):
        assert copy == "--from=build /opt/venv /opt/venv", copy
    for stage in stages:
        assert _all(stage, "ADD") == [], "ADD fetches URLs and unpacks archives: use COPY"
        for run in _all(stage, "RUN"):
            assert not re.search(r"\b(curl|wget)\b", run), run


def test_the_entrypoint_is_lease_worker_in_exec_form() -> None:
    final = _stages()[-1]
    (entrypoint,) = _all(final, "ENTRYPOINT")
    # Exec form: lease-worker is PID 1 and gets SIGTERM itself (a shell would swallow it).
    assert json.loads(entrypoint) == ["lease-worker"]


def test_no_secret_is_baked_in() -> None:
    for stage in _stages():
        for keyword in ("ENV", "ARG"):
            for arguments in _all(stage, keyword):
                names = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", arguments) or [arguments]
                for name in names:
                    assert not SECRET_NAMES.search(name), f"{keyword} {name}"


def test_the_image_exposes_the_ops_port() -> None:
    (exposed,) = _all(_stages()[-1], "EXPOSE")
    resources = rendered(BASE)
    (port,) = worker_container(resources)["ports"]
    assert exposed == str(port["containerPort"]) == config_data(resources)["LEASE_WORKER_OPS_PORT"]


def test_the_build_copies_the_packages_pyproject_names() -> None:
    build = _stages()[0]
    copied = {copy.split()[0].rstrip("/") for copy in _all(build, "COPY")}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # Top-level packages of `packages.find`'s include patterns ("worker", "worker.*", ...).
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.split(".")[0] for pattern in include}
    assert packages == {"worker", "backends"}
    assert packages <= copied
    assert (ROOT / pyproject["project"]["readme"]).exists()


@pytest.mark.parametrize(
    "entry", [".git", ".venv", ".env", ".aws", "*.pem", "tests", "**/__pycache__"]
)
def test_the_build_context_leaves_out(entry: str) -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert entry in ignored


def test_the_build_context_keeps_what_the_build_copies() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    for copy in _all(_stages()[0], "COPY"):
        for source in copy.split()[:-1]:
            assert source.rstrip("/") not in ignored, source
            assert (ROOT / source).exists(), source


def test_the_parser_reads_continuations_and_stages() -> None:
    text = "FROM a:1.2.3 AS x\nRUN one \\\n    two\n# RUN gcc\nFROM a:1.2.3\nUSER 1:1\n"
    assert parse(text) == [
        [("FROM", "a:1.2.3 AS x"), ("RUN", "one two")],
        [("FROM", "a:1.2.3"), ("USER", "1:1")],
    ]


def _lock_script() -> Any:
    path = str(ROOT / "scripts" / "lock")
    loader = importlib.machinery.SourceFileLoader("lock_script", path)
    spec = importlib.util.spec_from_file_location(loader.name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_build_installs_the_locked_versions() -> None:
    build = _stages()[0]
    assert "PIP_CONSTRAINT=/src/constraints.txt" in " ".join(_all(build, "ENV"))
    assert _all(build, "WORKDIR") == ["/src"]
    assert any("constraints.txt" in copy.split()[:-1] for copy in _all(build, "COPY"))
    (install,) = [run for run in _all(build, "RUN") if "pip install" in run]
    assert "pip install --no-compile --constraint constraints.txt ." in install


def test_two_builds_of_one_commit_write_the_same_bytes() -> None:
    """What makes one digest of two builds (issue 42, 7), short of building (no engine
    here): every stage takes SOURCE_DATE_EPOCH; bytecode holds no time and one set order;
    what each RUN writes is dated SOURCE_DATE_EPOCH; useradd logs nothing."""
    build, final = _stages()
    dated = 'touch --no-dereference --date="@${SOURCE_DATE_EPOCH}"'
    for stage in (build, final):
        assert "SOURCE_DATE_EPOCH=0" in _all(stage, "ARG")
    # The final image takes /opt/venv from the build stage, as its last RUN leaves it.
    assert _all(final, "COPY") == ["--from=build /opt/venv /opt/venv"]
    install = _all(build, "RUN")[-1]
    assert install.endswith(f"find /opt/venv -exec {dated} {{}} +")
    assert all(dated in run for run in _all(final, "RUN"))
    assert "PYTHONDONTWRITEBYTECODE=1" in " ".join(_all(build, "ENV"))
    assert "PYTHONHASHSEED=0 /opt/venv/bin/python -m compileall" in install
    assert "--invalidation-mode unchecked-hash /opt/venv/lib" in install
    assert install.index("compileall") < install.index("find /opt/venv -exec touch")
    (users,) = _all(final, "RUN")
    assert "useradd --system --no-log-init" in users
    assert "PYTHONDONTWRITEBYTECODE=1 python -m pip uninstall" in users
    assert users.index("touch /tmp/.step") < users.index("groupadd")
    assert users.index("uninstall") < users.index("-newer /tmp/.step")


def test_unchecked_hash_bytecode_is_the_same_bytes_with_any_hash_seed(tmp_path: Path) -> None:
    """The Dockerfile's compileall line, twice, on the package at one path (a code object
    holds its file's path): the same .pyc bytes whatever the file times."""
    outputs = []
    copy = tmp_path / "worker"
    for run in range(2):
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(ROOT / "worker", copy, ignore=shutil.ignore_patterns("__pycache__"))
        for path in copy.rglob("*.py"):
            os.utime(path, (1_000_000 + run, 1_000_000 + run))
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        command = [sys.executable, "-m", "compileall", "-q", "--invalidation-mode"]
        subprocess.run([*command, "unchecked-hash", str(copy)], env=env, check=True, timeout=120)
        outputs.append({p.relative_to(copy): p.read_bytes() for p in sorted(copy.rglob("*.pyc"))})
    assert outputs[0] and outputs[0] == outputs[1]


def test_the_lock_pins_every_package_the_image_installs() -> None:
    """Every package of the runtime dependencies' closure (and the build backend) is pinned
    to one exact version, which satisfies what pyproject.toml asks for; nothing else is."""
    lock = _lock_script()
    lines = [
        line for line in (ROOT / "constraints.txt").read_text().splitlines() if line[:1] != "#"
    ]
    pins = dict(line.split("==") for line in lines)
    assert all(re.fullmatch(r"[a-z0-9-]+", name) for name in pins), pins
    assert sorted(pins) == sorted(lock.closure(lock.roots()))
    for requirement in lock.roots():
        version = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(version), (requirement, version)


def _fake_engine(directory: Path, name: str, *, info_ok: bool) -> Path:
    calls = directory / f"{name}.calls"
    script = directory / name
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        f'if [ "$1" = info ]; then exit {0 if info_ok else 1}; fi\n'
        'if [ "$1" = image ]; then echo sha256:1234; fi\n'
    )
    script.chmod(0o755)
    return calls


@pytest.mark.parametrize(("engine_env", "expected"), [(None, "podman"), ("docker", "docker")])
def test_scripts_image_builds_with_docker_or_podman(
    tmp_path: Path, engine_env: str | None, expected: str
) -> None:
    # A docker whose daemon does not answer, and a podman: without a choice, podman builds.
    calls = {
        "docker": _fake_engine(tmp_path, "docker", info_ok=False),
        "podman": _fake_engine(tmp_path, "podman", info_ok=True),
    }
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    if engine_env:
        env["CONTAINER_ENGINE"] = engine_env
    run = subprocess.run(
        [str(ROOT / "scripts" / "image")], env=env, capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 0, run.stderr
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    epoch = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    times = {
        "docker": "--output type=docker,rewrite-timestamp=true",
        "podman": f"--timestamp {epoch}",
    }[expected]
    build = (
        f"build --file {ROOT}/Dockerfile --tag lease-worker:{version} "
        f"--build-arg SOURCE_DATE_EPOCH={epoch} {times} {ROOT}"
    )
    inspect = "image inspect --format {{.Id}} lease-worker:" + version
    assert calls[expected].read_text().splitlines()[-2:] == [build, inspect]
    assert run.stdout.splitlines()[-1] == "sha256:1234"
    other = calls["docker" if expected == "podman" else "podman"]
    assert "build" not in (other.read_text() if other.exists() else "")
