"""deploy/docker/Dockerfile and .dockerignore: the facts that matter, read from the files.

No Docker engine runs here, so the image is not built; these checks hold the Dockerfile
to what the Kubernetes manifests and the sidecar rely on.
"""

from __future__ import annotations

import re
import tomllib

from tests.deploy.support import DEPLOY, REPO

DOCKERFILE = DEPLOY / "docker" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` per instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result: list[tuple[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def test_slim_python_base() -> None:
    bases = [args for word, args in instructions() if word == "FROM"]
    assert bases and all(b.startswith("python:3.12-slim") for b in bases)


def test_runs_as_a_non_root_user() -> None:
    users = [args for word, args in final_stage() if word == "USER"]
    assert users, "the runtime stage sets no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric: runAsNonRoot can verify it
    created = " ".join(args for word, args in final_stage() if word == "RUN")
    assert f"--uid {uid}" in created


def test_entry_point_is_the_console_script() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    steps = dict(final_stage())
    assert steps["ENTRYPOINT"] == '["ksidecar"]'
    assert "ksidecar" in scripts
    assert steps["CMD"] == '["run", "--config", "/etc/ksidecar/sidecar.properties"]'


def test_healthcheck_asks_healthz_on_the_metrics_port() -> None:
    steps = final_stage()
    check = next(args for word, args in steps if word == "HEALTHCHECK")
    assert "urllib.request.urlopen" in check
    env = " ".join(args for word, args in steps if word == "ENV")
    url = re.search(r"HEALTHCHECK_URL=(\S+)", env)
    assert url is not None and url.group(1) == "http://127.0.0.1:9404/healthz"
    exposed = next(args for word, args in steps if word == "EXPOSE").split()
    assert exposed == ["9092", "9404"]


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = {
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", "tests"} <= patterns
    # What `pip wheel .` needs must stay in.
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    needed = {"pyproject.toml", "README.md"} | {
        p.rstrip("*") for p in packages["packages"]["find"]["include"]
    }
    assert not needed & patterns
