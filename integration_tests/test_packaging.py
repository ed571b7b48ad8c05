"""What users get from `pip install`: the wheel's layout, Spark's auto-registration, the opt-in pyspark
import hook, the compose file."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from txkafka.installed_pyspark import PTH_NAME as PTH

REPO = Path(__file__).resolve().parent.parent


def _build_wheel(tmp_path: Path) -> Path:
    """The wheel of the repository's tracked files, built from a clean copy: a working tree's
    leftovers (an old build/ directory, untracked files) must not reach what is tested."""
    src = tmp_path / "src"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                             check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, timeout=300)
    return next((tmp_path / "dist").glob("txkafka-*.whl"))


def test_wheel_installs_under_txkafka_and_registers_by_scan(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "pyspark_txkafka.py" in names
    assert "txkafka/connector/sink/committer.py" in names
    assert "txkafka/python_datasource/kafka_source_provider.py" in names
    assert not any(n.startswith(("connector/", "python_datasource/")) for n in names)
    assert not any(n.endswith(".pth") for n in names)  # nothing that runs in other programs

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


def _fresh_venv_with_wheel(tmp_path: Path) -> tuple[Path, Path]:
    """A new venv with only txkafka's wheel installed (pip install --no-deps), pyspark linked in
    (without copying 400 MB), and this environment's other dependencies on its path."""
    import pyspark

    wheel = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
    site_dir = Path(subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
    (site_dir / "pyspark").symlink_to(Path(pyspark.__file__).parent)
    # A plain path line (no .pth of that directory runs): confluent-kafka, pyarrow... for the CLI.
    deps = Path(pyspark.__file__).parent.parent
    (site_dir / "zz-test-dependencies.pth").write_text(f"{deps}\n")
    return venv, site_dir


def test_pyspark_bytecode_hook_is_off_after_install_and_switched_by_one_command(tmp_path):
    """pip install changes no other program: no hook until `txkafka pyspark-bytecode enable`, which
    makes a process started the way Spark starts its Python workers (the installed pyspark's own
    zip first on PYTHONPATH) import the installed package; `disable` restores Spark's zip."""
    venv, site_dir = _fresh_venv_with_wheel(tmp_path)
    assert not list(site_dir.glob("txkafka*.pth"))
    cli = venv / "bin" / "txkafka"
    lib = site_dir / "pyspark" / "python" / "lib"
    spark_path = os.pathsep.join([str(lib / "pyspark.zip"), str(next(lib.glob("py4j-*-src.zip")))])
    probe = "import pyspark, sys; print(pyspark.__file__); print(any('pyspark.zip' in p for p in sys.path))"
    zipped = [str(lib / "pyspark.zip" / "pyspark" / "__init__.py"), "True"]
    installed = [str(site_dir / "pyspark" / "__init__.py"), "False"]

    def run(*cmd: str, env: dict | None = None) -> str:
        got = subprocess.run(list(cmd), capture_output=True, text=True, timeout=120, cwd=tmp_path,
                             env={**os.environ, **(env or {})})
        assert got.returncode == 0 and got.stderr == "", got.stdout + got.stderr
        return got.stdout

    def spark_like_import() -> list[str]:
        return run(str(venv / "bin" / "python"), "-c", probe, env={"PYTHONPATH": spark_path}).split()

    assert spark_like_import() == zipped
    assert "pyspark-bytecode: disabled" in run(str(cli), "pyspark-bytecode", "status")
    assert f"enabled: {site_dir / PTH}" in run(str(cli), "pyspark-bytecode", "enable")
    assert "pyspark-bytecode: enabled" in run(str(cli), "pyspark-bytecode", "status")
    assert spark_like_import() == installed
    assert "disabled: removed" in run(str(cli), "pyspark-bytecode", "disable")
    assert not (site_dir / PTH).exists()
    assert spark_like_import() == zipped


def _default(value: str) -> str:
    """Compose's ``${VAR:-default}``: the value used when VAR is unset."""
    m = re.fullmatch(r"\$\{\w+:-(.+)\}", value)
    return m.group(1) if m else value


def test_compose_file_is_valid():
    """docker/docker-compose.yml, checked without Docker tools: what a cluster with working
    transactions needs, and the demo container wired to it."""
    compose = yaml.safe_load((REPO / "docker" / "docker-compose.yml").read_text())  # "<<" merges
    services = compose["services"]
    assert set(services) == {"kafka1", "kafka2", "kafka3", "spark"}
    brokers = {n: s for n, s in services.items() if n.startswith("kafka")}
    envs = {n: s["environment"] for n, s in brokers.items()}
    nodes = len(brokers)
    voters = sorted(f"{e['KAFKA_NODE_ID']}@{services[n]['hostname']}:9093" for n, e in envs.items())
    internal = []
    for name, svc in brokers.items():
        assert "profiles" not in svc  # `docker compose up` starts the cluster
        image = _default(svc["image"])
        assert image.startswith("apache/kafka:"), image  # Apache Kafka itself, nothing compatible
        version = tuple(int(x) for x in image.split(":", 1)[1].split(".")[:2])
        assert version >= (3, 6), image  # transaction partition verification (no hanging txns)
        env = envs[name]
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert sorted(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == voters
        rf = int(env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"])
        assert rf <= nodes and int(env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"]) <= nodes
        assert 1 <= int(env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"]) < rf  # one node may restart
        assert env["CLUSTER_ID"] == envs["kafka1"]["CLUSTER_ID"]
        advertised = dict(a.split("://") for a in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
        ext_port = advertised["EXTERNAL"].rsplit(":", 1)[1]
        assert advertised["EXTERNAL"] == f"localhost:{ext_port}"
        assert svc["ports"] == [f"{ext_port}:{ext_port}"]
        assert f"EXTERNAL://:{ext_port}" in env["KAFKA_LISTENERS"].split(",")
        internal.append(advertised["INTERNAL"])
    assert len({e["KAFKA_NODE_ID"] for e in envs.values()}) == nodes
    spark = services["spark"]
    assert spark["profiles"] == ["spark"]
    assert (REPO / "docker" / spark["build"]["context"] / spark["build"]["dockerfile"]).is_file()
    assert spark["depends_on"] == {n: {"condition": "service_healthy"} for n in brokers}
    assert spark["command"] == ["txkafka", "demo", "--bootstrap-servers", ",".join(sorted(internal))]
