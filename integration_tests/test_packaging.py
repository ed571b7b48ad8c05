"""What users get from `pip install`: the wheel's layout, Spark's auto-registration, the compose file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_wheel_installs_under_txkafka_and_registers_by_scan(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(REPO)], check=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("txkafka-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "pyspark_txkafka.py" in names
    assert "txkafka/connector/kafka_committer.py" in names
    assert "txkafka/python_datasource/kafka_source_provider.py" in names
    assert not any(n.startswith(("connector/", "python_datasource/")) for n in names)

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, timeout=300)
    # Spark's lookup (pyspark/sql/worker/lookup_data_sources.py) scans iter_modules() for pyspark_*.
    probe = (
        "import pkgutil, importlib, sys\n"
        f"sys.path.insert(0, {str(target)!r})\n"
        "found = [m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_')]\n"
        "mod = importlib.import_module('pyspark_txkafka')\n"
        "print(found, mod.DefaultSource.name(), mod.__file__)\n"
    )
    out = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             p for p in sys.path if "site-packages" in p)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pyspark_txkafka" in out.stdout and " txkafka " in out.stdout
    assert str(target) in out.stdout  # imported from the wheel's install, not from the repo


def _compose_cmd() -> list[str]:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                 capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise AssertionError("neither 'docker compose' nor 'docker-compose' is installed; .ci/run "
                         "installs Debian's docker-compose")


def test_compose_file_is_valid():
    compose = REPO / "docker" / "docker-compose.yml"
    cmd = _compose_cmd()
    out = subprocess.run(cmd + ["-f", str(compose), "--profile", "spark", "config", "--services"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert set(out.stdout.split()) == {"kafka1", "kafka2", "kafka3", "spark"}
