"""What users get from a release: the sdist and the wheel `make dist` builds, the wheel in a new
virtual environment (its command, Spark's auto-registration, an exactly-once query), the same
environment shipped to a standalone cluster's executors (docs/deployment.md), the opt-in pyspark
import hook, the compose file."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from integration_tests.pipeline_helpers import assert_exactly_once, make_input
from integration_tests.spark_standalone import running_cluster
from txkafka import __version__
from txkafka.installed_pyspark import PTH_NAME as PTH

REPO = Path(__file__).resolve().parent.parent
APP = Path(__file__).resolve().parent / "shipped_app.py"
# A host's own programs, none of this machine's development tools: where the standalone cluster's
# workers (and so their executors) run, and what a user's shell adds a virtual environment to.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
APP_TIMEOUT_S = 300


@dataclass(frozen=True)
class Release:
    sdist: Path
    wheel: Path


def _tracked_copy(dest: Path) -> Path:
    """The repository's tracked files, copied: a working tree's leftovers (an old build/ directory,
    untracked files) must not reach what is tested."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                             check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Release:
    """`make dist`'s command on the tracked files: the sdist, then the wheel built from it."""
    tmp = tmp_path_factory.mktemp("release")
    src = _tracked_copy(tmp / "src")
    subprocess.run([sys.executable, "-m", "build", "-q", "--outdir", str(tmp / "dist"), str(src)],
                   check=True, timeout=600, capture_output=True)
    return Release(next((tmp / "dist").glob("txkafka-*.tar.gz")),
                   next((tmp / "dist").glob("txkafka-*.whl")))


def test_wheel_installs_under_txkafka_and_registers_by_scan(tmp_path, release):
    wheel = release.wheel
    names = zipfile.ZipFile(wheel).namelist()
    assert "pyspark_txkafka.py" in names
    assert "txkafka/connector/sink/committer.py" in names
    assert "txkafka/python_datasource/kafka_source_provider.py" in names
    assert not any(n.startswith(("connector/", "python_datasource/")) for n in names)
    assert not any(n.startswith("txkafka/devtools/") for n in names)  # developer tooling stays home
    assert not any(n.endswith(".pth") for n in names)  # nothing that runs in other programs
    # pyproject's license expression comes with its text
    license_text = zipfile.ZipFile(wheel).read(f"txkafka-{__version__}.dist-info/licenses/LICENSE")
    assert license_text == (REPO / "LICENSE").read_bytes()
    assert b"Apache License\n                           Version 2.0, January 2004" in license_text

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


def _system_env(**extra: str) -> dict[str, str]:
    """A host's environment without anything of this test run: its own programs, Java, a home."""
    env = {"PATH": SYSTEM_PATH, "HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8"}
    java = shutil.which("java")
    if java and os.path.dirname(java) not in SYSTEM_PATH.split(os.pathsep):
        env["PATH"] += os.pathsep + os.path.dirname(java)
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return {**env, **extra}


@dataclass(frozen=True)
class UserEnv:
    """A user's folder: their driver program beside ``env/``, a virtual environment."""

    app: Path
    env: Path

    @property
    def python(self) -> str:
        return str(self.env / "bin" / "python")

    def activated(self, **extra: str) -> dict[str, str]:
        """The environment of a shell that ran ``source env/bin/activate``."""
        return _system_env(PATH=f"{self.env / 'bin'}{os.pathsep}{_system_env()['PATH']}",
                           VIRTUAL_ENV=str(self.env), **extra)

    def start(self, driver_processes, cfg: dict, env: dict[str, str], cwd: Path | None = None,
              launcher: list[str] | None = None):
        """The driver program, on the environment's Python unless ``launcher`` says otherwise
        (its spark-submit), with ``env`` and nothing else but the JVM's temp folder: the
        driver's scratch space (the packed environment, unpacked: 300 MB) goes to the test's
        folder, as the harness kills the driver at the end, which then never cleans up /tmp."""
        tmp = self.app / "jvm-tmp"
        tmp.mkdir(exist_ok=True)
        env = {**env, "SPARK_SUBMIT_OPTS": " ".join(
            filter(None, [env.get("SPARK_SUBMIT_OPTS"), f"-Djava.io.tmpdir={tmp}"]))}
        return driver_processes(self.app / APP.name, json.dumps(cfg), env=env,
                                launcher=launcher or [self.python], cwd=cwd or self.app,
                                inherit_env=False)


@pytest.fixture(scope="module")
def user_env(release, tmp_path_factory) -> UserEnv:
    """A new virtual environment with the wheel and its dependencies installed by pip (whose cache
    may serve them) and nothing of this repository: docs/deployment.md's first step."""
    app = tmp_path_factory.mktemp("app")
    env = app / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    pip_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", str(release.wheel)],
                   check=True, timeout=900, env=pip_env, cwd=app)
    shutil.copy2(APP, app / APP.name)
    return UserEnv(app, env)


def _app_config(kafka, topics, checkpoint: Path, master: str, trigger: str, *,
                max_offsets: int = 200, **conf: str) -> dict:
    from txkafka.spark_session import BASE_CONF  # loopback driver, no UI: this machine's network

    return {"master": master, "bootstrap": kafka.bootstrap, "input": topics.source,
            "output": topics.sink, "checkpoint": str(checkpoint), "trigger": trigger,
            "max_offsets": max_offsets, "timeout_s": APP_TIMEOUT_S,
            "conf": {**BASE_CONF, **conf}}


def test_wheel_in_a_new_environment_runs_an_exactly_once_query(release, user_env, kafka,
                                                               driver_processes):
    """`make dist`'s files carry the package version; the wheel, installed with its dependencies
    into a new environment, answers `txkafka --version`, imports from that environment only, and
    runs a Kafka -> txkafka -> Kafka query exactly once with the environment activated and no
    other setting: Spark's own scan of that Python finds format("txkafka").

    The environment's Python started by its path, not activated (an IDE, cron, a service), fails
    at load() as README's Install section says: Spark starts python3 from PATH, another Python,
    whose scan finds no txkafka (DATA_SOURCE_NOT_FOUND), and nothing is written."""
    assert release.sdist.name == f"txkafka-{__version__}.tar.gz"
    assert release.wheel.name == f"txkafka-{__version__}-py3-none-any.whl"
    metadata = zipfile.ZipFile(release.wheel).read(
        f"txkafka-{__version__}.dist-info/METADATA").decode()
    assert f"\nVersion: {__version__}\n" in metadata

    shell = user_env.activated()
    got = subprocess.run(["txkafka", "--version"], env=shell, cwd=user_env.app,
                         capture_output=True, text=True, timeout=60)
    assert (got.returncode, got.stdout) == (0, f"txkafka {__version__}\n"), got.stderr
    probe = ("import json, sys, importlib.metadata as md, txkafka, pyspark_txkafka\n"
             "print(json.dumps({'files': [txkafka.__file__, pyspark_txkafka.__file__],"
             " 'path': sys.path, 'direct_url': md.distribution('txkafka')"
             ".read_text('direct_url.json')}))")
    got = subprocess.run(["python", "-c", probe], env=shell, cwd=user_env.app,
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    seen = json.loads(got.stdout)
    assert all(f.startswith(str(user_env.env / "lib")) for f in seen["files"]), seen["files"]
    assert not [p for p in seen["path"] if p.startswith(str(REPO))]
    assert "editable" not in seen["direct_url"]  # installed from the wheel file, not a checkout

    topics = make_input(kafka, records=600, partitions=2, out_partitions=2, per_txn=150)
    not_activated = user_env.start(driver_processes, _app_config(
        kafka, topics, user_env.app / "checkpoint-not-activated", "local[1]", "available_now"),
        _system_env())
    assert not_activated.wait(APP_TIMEOUT_S) != 0, not_activated.tail()
    assert "SESSION" in not_activated.output(), not_activated.tail()  # it failed at load()
    assert "[DATA_SOURCE_NOT_FOUND] Failed to find the data source: txkafka" in \
        not_activated.output(), not_activated.tail()
    assert kafka.read_all(topics.sink, isolation="read_uncommitted") == []

    checkpoint = user_env.app / "checkpoint-local"
    cfg = _app_config(kafka, topics, checkpoint, "local[2]", "available_now")
    driver = user_env.start(driver_processes, cfg, shell)
    assert driver.wait(APP_TIMEOUT_S) == 0, driver.tail()
    assert "DONE" in driver.output()
    assert_exactly_once(kafka, topics, str(checkpoint))
    print(f"\nlocal mode from the wheel: first batch {_first_batch_s(driver.output()):.1f} s")


@pytest.fixture(scope="module")
def shipped_env(user_env) -> Path:
    """The environment packed with venv-pack, as PySpark's package-management guide does, less
    PySpark itself: executors import the cluster's own (SPARK_HOME's python/lib)."""
    archive = user_env.app / "env.tar.gz"
    site = "lib/python*/site-packages"
    excludes = [f"{site}/pyspark/*", f"{site}/pyspark-*", f"{site}/py4j/*", f"{site}/py4j-*"]
    subprocess.run([str(Path(sys.executable).parent / "venv-pack"), "-p", str(user_env.env),
                    "-o", str(archive), "-q", *(a for x in excludes for a in ("--exclude", x))],
                   check=True, timeout=600)
    return archive


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory):
    """A standalone cluster whose worker (so its executors) has the host's environment only: no
    txkafka, no Arrow, no Kafka client."""
    yield from running_cluster(tmp_path_factory.mktemp("bare-cluster"), workers=1, cores=2,
                               env=_system_env())


def _processes() -> dict[int, tuple[int, list[str], str]]:
    """pid -> (parent pid, argv, working directory) of every process visible here."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            found[int(d.name)] = (ppid, argv, os.readlink(d / "cwd"))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _spark_pythons(roots: set[int]) -> list[tuple[list[str], str]]:
    """(argv, working directory) of the Python processes Spark started under ``roots``."""
    procs = _processes()
    found, frontier = [], set(roots)
    while frontier:
        frontier = {pid for pid, (ppid, _, _) in procs.items() if ppid in frontier}
        found += [procs[pid][1:] for pid in frontier]
    return [(argv, cwd) for argv, cwd in found if any(a.startswith("pyspark.") for a in argv)]


def _first_batch_s(output: str) -> float:
    return float(re.search(r"^BATCH \d+ rows=\d+ t=([\d.]+)$", output, re.M).group(1))


def test_packed_environment_ships_txkafka_to_bare_executors(user_env, shipped_env, bare_cluster,
                                                            kafka, driver_processes):
    """docs/deployment.md's standalone recipe: spark.archives=env.tar.gz#env, PYSPARK_PYTHON=
    ./env/bin/python in the driver's environment, the driver started in the folder that holds env/.
    The executors run the archive's Python (the host has no txkafka, Arrow or Kafka client), the
    driver JVM's Python processes (Spark's data source scan, planning, the streaming source and
    sink's commits) run ./env/bin/python from the driver's folder; a driver SIGKILLed mid-stream
    and restarted from its checkpoint leaves every committed record in the output exactly once."""
    for module in ("pyarrow", "confluent_kafka", "txkafka"):
        try:
            bare = subprocess.run(["python3", "-c", f"import {module}"], env=_system_env(),
                                  cwd=bare_cluster.root, capture_output=True, timeout=60).returncode
        except FileNotFoundError:
            bare = 127  # no python3 at all: nothing there either
        assert bare != 0, f"the workers' host Python has {module}"

    topics = make_input(kafka, records=3000, partitions=2, out_partitions=2, per_txn=250)
    checkpoint = user_env.app / "checkpoint-shipped"
    recipe = {"spark.archives": f"{shipped_env}#env"}
    shell = user_env.activated(PYSPARK_PYTHON="./env/bin/python")
    started = time.monotonic()
    first = user_env.start(driver_processes, _app_config(
        kafka, topics, checkpoint, bare_cluster.master_url, "processing_time", **recipe), shell)
    assert first.wait_for_output("BATCH ", APP_TIMEOUT_S), first.tail()
    first_batch_s = time.monotonic() - started
    driver_side = _spark_pythons({first.pid})
    executor_side = _spark_pythons(set(bare_cluster.executor_pids()))
    first.kill(signal.SIGKILL)
    committed = len(kafka.read_all(topics.sink))
    assert 0 < committed < topics.expected_ids  # killed mid-stream

    assert driver_side and executor_side, (driver_side, executor_side)
    assert {(argv[0], cwd) for argv, cwd in driver_side} == {("./env/bin/python",
                                                             str(user_env.app))}
    for argv, cwd in executor_side:
        assert argv[0] == "./env/bin/python" and cwd.startswith(str(bare_cluster.root)), argv
        unpacked = Path(cwd) / "env"
        assert unpacked.is_dir() and not unpacked.is_symlink()
        assert not list(unpacked.glob("lib/python*/site-packages/pyspark"))  # the archive's

    # The restart through spark-submit: its driver program runs PYSPARK_PYTHON too, from here.
    # It catches up in a few batches (the first run's small ones made the kill land mid-stream).
    second = user_env.start(driver_processes, _app_config(
        kafka, topics, checkpoint, bare_cluster.master_url, "available_now", max_offsets=1000),
        shell,
        launcher=[str(user_env.env / "bin" / "spark-submit"), "--master", bare_cluster.master_url,
                  "--archives", f"{shipped_env}#env"])
    assert second.wait(APP_TIMEOUT_S) == 0, second.tail()
    assert "DONE" in second.output()
    assert_exactly_once(kafka, topics, str(checkpoint))
    print(f"\nshipped environment: {shipped_env.stat().st_size / 1e6:.0f} MB; first batch "
          f"{first_batch_s:.1f} s after the driver started ({_first_batch_s(first.output()):.1f} s "
          f"in its Python), {committed} records committed before the kill; restart's first batch "
          f"{_first_batch_s(second.output()):.1f} s")


def test_setups_a_python_data_source_does_not_survive_fail_loudly(user_env, shipped_env,
                                                                  bare_cluster, kafka,
                                                                  driver_processes, tmp_path):
    """Two set-ups of PySpark's recipe that work for Python UDFs and not for a Python data source,
    each failing the query with the cause named and nothing written:
    - spark.pyspark.python on the session builder instead of PYSPARK_PYTHON in the driver's
      environment: Spark starts the source's Python processes on python3 from each host's PATH,
      and the executors' has no Arrow;
    - PYSPARK_PYTHON=./env/bin/python with the driver started outside the folder that holds env/:
      the driver JVM looks for that Python from its own folder, finds none and skips its scan for
      data sources."""
    topics = make_input(kafka, records=200, partitions=2, out_partitions=2, per_txn=100)

    builder_conf = user_env.start(driver_processes, _app_config(
        kafka, topics, tmp_path / "c1", bare_cluster.master_url, "available_now",
        **{"spark.archives": f"{shipped_env}#env", "spark.pyspark.python": "./env/bin/python"}),
        user_env.activated())
    assert builder_conf.wait(APP_TIMEOUT_S) == 2, builder_conf.tail()
    failure = builder_conf.output()[builder_conf.output().index("FAILED"):]
    # python3 on the workers' PATH: the host's, without Arrow (or none at all)
    assert "No module named 'pyarrow'" in failure or 'program "python3"' in failure, failure

    # Local mode and no archive: Spark's scan looks for the Python from the driver's folder alone.
    elsewhere = user_env.start(driver_processes, _app_config(
        kafka, topics, tmp_path / "c2", "local[1]", "available_now"),
        user_env.activated(PYSPARK_PYTHON="./env/bin/python"), cwd=tmp_path)
    assert elsewhere.wait(APP_TIMEOUT_S) != 0
    assert "DATA_SOURCE_NOT_FOUND" in elsewhere.output(), elsewhere.tail()
    assert kafka.read_all(topics.sink, isolation="read_uncommitted") == []


def _fresh_venv_with_wheel(tmp_path: Path, wheel: Path) -> tuple[Path, Path]:
    """A new venv with only txkafka's wheel installed (pip install --no-deps), pyspark linked in
    (without copying 400 MB), and this environment's other dependencies on its path."""
    import pyspark

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


def test_pyspark_bytecode_hook_is_off_after_install_and_switched_by_one_command(tmp_path, release):
    """pip install changes no other program: no hook until `txkafka pyspark-bytecode enable`, which
    makes a process started the way Spark starts its Python workers (the installed pyspark's own
    zip first on PYTHONPATH) import the installed package; `disable` restores Spark's zip."""
    venv, site_dir = _fresh_venv_with_wheel(tmp_path, release.wheel)
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
