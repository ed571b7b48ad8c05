"""docker/Dockerfile and docs/deployment.md, checked without Docker (CI builds no image): the
official Apache Spark image (python3 variant) of a Spark release txkafka supports, a Python that
meets the wheel's Requires-Python from the base image's packages, txkafka's wheel with its
dependencies less PySpark in a virtual environment on it, PYSPARK_PYTHON naming that environment's
Python, and a deployment page that says of every route whether it is tested here."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "docker" / "Dockerfile"
DEPLOYMENT = REPO / "docs" / "deployment.md"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def _dependencies() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def _args() -> dict[str, str]:
    return dict(a.split("=", 1) for kind, a in _instructions() if kind == "ARG" and "=" in a)


def _default_image() -> str:
    return _args()["SPARK_IMAGE"]


def test_image_is_the_official_spark_python_image_of_a_supported_release():
    kinds = [kind for kind, _ in _instructions()]
    assert ("FROM", "${SPARK_IMAGE}") in _instructions()
    assert kinds.index("ARG") < kinds.index("FROM")  # the default is known before FROM
    m = re.fullmatch(r"apache/spark:(\d+\.\d+\.\d+)-scala2\.13-java(17|21)-python3-ubuntu",
                     _default_image())
    assert m, _default_image()
    pyspark = next(r for r in _dependencies() if r.name == "pyspark")
    assert Version(m.group(1)) in pyspark.specifier, (m.group(1), str(pyspark))
    assert f"`{_default_image()}`" in DEPLOYMENT.read_text()  # the page names the same image


def test_python_processes_run_the_environment_that_has_txkafka():
    steps = _instructions()
    envs = dict(a.split("=", 1) for kind, a in steps if kind == "ENV")
    python = Path(envs["PYSPARK_PYTHON"])
    venv = python.parent.parent
    run = " ".join(a for kind, a in steps if kind == "RUN")
    assert f"${{PYTHON}} -m venv {venv}" in run
    assert f"{venv}/bin/pip install --no-cache-dir --no-deps /tmp/wheels/txkafka-" in run
    assert f"{venv}/bin/txkafka --version" in run  # the build fails if the install does not work
    assert "PYSPARK_DRIVER_PYTHON" not in envs  # it would win over PYSPARK_PYTHON for executors
    users = [a for kind, a in steps if kind == "USER"]
    assert users[-1] == "spark"  # the official image's user again, not root


def test_the_environment_is_made_on_a_python_that_meets_requires_python():
    """The official python3 image is Ubuntu 22.04 with its python3, 3.10, and no venv module: the
    image installs a versioned Python from Ubuntu's packages, with its venv, that the wheel's
    Requires-Python accepts, and makes the environment on it."""
    python = _args()["PYTHON"]
    m = re.fullmatch(r"python(3\.\d+)", python)
    assert m, python
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert Version(m.group(1)) in SpecifierSet(requires), (python, requires)
    run = " ".join(a for kind, a in _instructions() if kind == "RUN")
    install = re.search(r"apt-get install -y (?:--no-install-recommends )?([^;]+);", run)
    assert install and install.group(1).split() == ["${PYTHON}", "${PYTHON}-venv"], run
    assert run.index("apt-get update") < install.start() < run.index("${PYTHON} -m venv")
    assert "rm -rf /var/lib/apt/lists/*" in run


def test_image_installs_the_wheels_requirements_except_pyspark():
    """The image's one-liner, run here against the installed txkafka's metadata: pyproject's
    dependencies, less PySpark (the image's Spark provides it)."""
    run = " ".join(a for kind, a in _instructions() if kind == "RUN")
    command = re.search(r'/opt/txkafka/bin/python (-c "[^"]+")', run).group(1)
    out = subprocess.run(f"{sys.executable} {command}", shell=True, capture_output=True,
                         text=True, check=True, timeout=60).stdout
    got = sorted(str(Requirement(line)) for line in out.splitlines())
    assert got == sorted(str(r) for r in _dependencies() if r.name != "pyspark")


def test_deployment_page_marks_every_route():
    text = DEPLOYMENT.read_text()
    sections = dict(re.findall(r"^## (.+)\n\n(.+)", text, re.M))
    for route in ("Local mode", "Standalone cluster", "YARN", "Kubernetes", "Spark Connect",
                  "Databricks", "Amazon EMR", "Google Dataproc"):
        assert route in sections, f"docs/deployment.md has no section {route!r}"
        assert re.search(r"\*\*(Client mode, )?(tested here|documented only)",
                         sections[route], re.I), (route, sections[route])
    for mode in ("--deploy-mode client", "--deploy-mode cluster"):
        assert mode in text
