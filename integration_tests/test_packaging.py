"""What users get from `pip install`: the wheel's layout, Spark's auto-registration, the compose file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PTH = "txkafka-installed-pyspark.pth"


def test_wheel_installs_under_txkafka_and_registers_by_scan(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(REPO)], check=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("txkafka-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "pyspark_txkafka.py" in names
    assert "txkafka/connector/kafka_committer.py" in names
    assert "txkafka/python_datasource/kafka_source_provider.py" in names
    assert not any(n.startswith(("connector/", "python_datasource/")) for n in names)
    assert zipfile.ZipFile(wheel).read(PTH) == (REPO / PTH).read_bytes()  # top of site-packages

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


def test_wheel_install_makes_spark_python_import_pyspark_bytecode(tmp_path):
    """A plain `pip install` of the wheel into a fresh venv: a process started the way Spark starts
    its Python workers (the installed pyspark's own zip first on PYTHONPATH) imports the installed
    package instead; with the opt-out it imports the zip as before."""
    import pyspark

    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(REPO)], check=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("txkafka-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
    site_dir = Path(subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
    assert (site_dir / PTH).is_file()
    (site_dir / "pyspark").symlink_to(Path(pyspark.__file__).parent)  # pyspark, without 400 MB
    lib = site_dir / "pyspark" / "python" / "lib"
    spark_path = os.pathsep.join([str(lib / "pyspark.zip"), str(next(lib.glob("py4j-*-src.zip")))])
    probe = "import pyspark, sys; print(pyspark.__file__); print(any('pyspark.zip' in p for p in sys.path))"
    env = {k: v for k, v in os.environ.items() if k != "TXKAFKA_KEEP_PYSPARK_ZIP"}
    got = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env={**env, "PYTHONPATH": spark_path})
    assert got.returncode == 0 and got.stderr == "", got.stderr
    assert got.stdout.split() == [str(site_dir / "pyspark" / "__init__.py"), "False"]
    kept = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**env, "PYTHONPATH": spark_path,
                                             "TXKAFKA_KEEP_PYSPARK_ZIP": "1"})
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.split() == [str(lib / "pyspark.zip" / "pyspark" / "__init__.py"), "True"]


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
