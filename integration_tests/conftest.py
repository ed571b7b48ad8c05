"""Fixtures: a real Apache Kafka (testcontainers, the native embedded broker, or TXKAFKA_BOOTSTRAP),
a 3-node cluster, one shared SparkSession, and separate driver processes that tests can kill.

Every broker runs Apache Kafka ``TXKAFKA_KAFKA_VERSION`` (default: the newest tested); the
``kafka_matrix`` tests run again on the oldest tested in ``make test`` (.ci/pytest_gate.py).

Nothing here skips: if a broker or Spark cannot start, the tests that need them fail with the reason
(and the broker's log tail). Under CI=true any skip fails the run (conftest.py at the root).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from integration_tests import jvm_archive, kafka_container
from integration_tests.conftest_secure import secure_kafka  # noqa: F401  (session fixture)
from integration_tests.kafka_helpers import KafkaTarget
from txkafka.embedded_kafka import KAFKA_VERSION, EmbeddedKafka, EmbeddedKafkaError
from txkafka.spark_session import session_builder

# Executors start "python3" from PATH unless told: make them use this interpreter (it has txkafka).
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

BROKER_MODE = os.environ.get("TXKAFKA_BROKER", "auto")  # auto | native | testcontainers


def pytest_configure(config) -> None:
    jvm_archive.start_building()  # overlaps the unit tests and the broker's start


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-not-found]

        return bool(docker.from_env(timeout=3).ping())
    except Exception:  # noqa: BLE001 - any failure means "no Docker here"
        return False


def _docker_image() -> str | None:
    """The apache/kafka image of the suite's Kafka version, if Docker should run the broker."""
    if BROKER_MODE == "native" or (BROKER_MODE == "auto" and not _docker_answers()):
        return None
    image = kafka_container.image_for(KAFKA_VERSION)
    if image is None and BROKER_MODE == "testcontainers":
        pytest.fail(f"TXKAFKA_BROKER=testcontainers: Apache publishes no apache/kafka image for "
                    f"Kafka {KAFKA_VERSION} (the first is 3.7.0); set TXKAFKA_KAFKA_IMAGE to an "
                    "image of that version or use TXKAFKA_BROKER=native", pytrace=False)
    return image  # None in auto mode: the native broker runs that version


def native_kafka(cluster: EmbeddedKafka, what: str, timeout: float):
    """Start ``cluster`` for a fixture, yield it, destroy it; a broker that cannot start fails the
    run loudly with its log tail (never a skip)."""
    try:
        cluster.start(timeout=timeout)
    except EmbeddedKafkaError as e:
        cluster.destroy()
        pytest.fail(f"{what} did not start:\n{e}", pytrace=False)
    try:
        yield KafkaTarget(cluster.bootstrap_servers, "native", cluster)
    finally:
        cluster.destroy()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory) -> KafkaTarget:
    """A single-node Apache Kafka (version ``TXKAFKA_KAFKA_VERSION``) with transactions working."""
    external = os.environ.get("TXKAFKA_BOOTSTRAP")
    if external:
        yield KafkaTarget(external, "external")
        return
    image = _docker_image()
    if image:
        container = kafka_container.ApacheKafkaContainer(image)
        try:
            bootstrap = container.start(timeout=240)
            yield KafkaTarget(bootstrap, "testcontainers")
        finally:
            container.stop()
        return
    yield from native_kafka(EmbeddedKafka("pytest-single", 1, root=tmp_path_factory.mktemp("kafka1")),
                            "the native Kafka broker", timeout=240)


@pytest.fixture(scope="session")
def kafka3(tmp_path_factory) -> KafkaTarget:
    """A 3-node native cluster (RF 3, min ISR 2) for failover tests; tests may kill one node."""
    yield from native_kafka(EmbeddedKafka("pytest-three", 3, root=tmp_path_factory.mktemp("kafka3")),
                            "the 3-node Kafka cluster", timeout=300)


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory) -> str:
    """A real Schema Registry (Apicurio, Confluent API, compatibility BACKWARD, in-memory); its
    URL (the option schema.registry.url). One that cannot start fails loudly with its log tail."""
    from txkafka.embedded_registry import EmbeddedRegistry, EmbeddedRegistryError

    registry = EmbeddedRegistry("pytest", root=tmp_path_factory.mktemp("registry"))
    try:
        url = registry.start(timeout=180)
    except EmbeddedRegistryError as e:
        registry.stop(quiet=True)
        pytest.fail(f"the Schema Registry did not start:\n{e}", pytrace=False)
    try:
        yield url
    finally:
        registry.stop(quiet=True)


def spark_builder(app: str = "txkafka-tests", master: str = "local[2,4]"):
    return session_builder(app, master, {
        "spark.default.parallelism": "2",
        "spark.sql.streaming.stopTimeout": "30s",
        "spark.python.worker.reuse": "true",
    })


@pytest.fixture(scope="session")
def spark():
    """One local[2,4] SparkSession (2 cores, up to 4 task attempts) for the whole run."""
    jvm_archive.ready()
    try:
        session = spark_builder().getOrCreate()
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"Spark did not start: {type(e).__name__}: {e}", pytrace=False)
    session.sparkContext.setLogLevel("WARN")
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A standalone Spark cluster with two single-core workers on distinct loopback hosts."""
    from integration_tests.spark_standalone import running_cluster

    yield from running_cluster(tmp_path_factory.mktemp("spark-standalone"))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server (SeaweedFS, built from its Go module once; Go is a prerequisite) on
    127.0.0.1 with a signed identity. It fails loudly, never skips, if it cannot start."""
    from txkafka.embedded_s3 import EmbeddedS3, EmbeddedS3Error

    server = EmbeddedS3(tmp_path_factory.mktemp("s3"))
    try:
        server.start(timeout=180)
    except EmbeddedS3Error as e:
        server.destroy()
        pytest.fail(f"the S3 server (SeaweedFS) did not start:\n{e}", pytrace=False)
    yield server
    server.destroy()


@pytest.fixture
def checkpoint_dir():
    d = tempfile.mkdtemp(prefix="txkafka-ckpt-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def driver_processes():
    """Start query drivers as separate processes (so tests can SIGKILL them); all reaped at the end."""
    from integration_tests.spark_driver import DriverProcess

    started: list[DriverProcess] = []

    def start(script: str | Path, *args: str, env: dict | None = None,
              **how: object) -> DriverProcess:
        proc = DriverProcess(script, list(args), env=env, **how)  # launcher, cwd, inherit_env
        proc.start()
        started.append(proc)
        return proc

    yield start
    for p in started:
        p.kill()


# Under ``--dist loadfile`` (the test command), a test file is one unit of work for one xdist
# worker. These tests join another unit so that each expensive session resource starts once:
# the secured broker (both security files) and the standalone Spark cluster (the chaos file's).
_SHARED_UNITS = {
    "integration_tests/test_security_transport.py": "integration_tests/test_security_pipeline.py",
    "integration_tests/test_wire_producer_security.py":
        "integration_tests/test_security_pipeline.py",
    "integration_tests/test_two_clusters.py": "integration_tests/test_security_pipeline.py",
    # a 3-node cluster shared with the producer's failover tests (the campaigns have their own)
    "integration_tests/test_rolling_restart.py": "integration_tests/test_wire_producer_failover.py",
    "integration_tests/test_writer_exactly_once.py::test_speculative_execution_on_a_cluster":
        "integration_tests/test_chaos.py",
    **{f"integration_tests/test_late_transactions.py::{name}": "integration_tests/test_chaos.py"
       for name in ("test_late_attempts_are_aborted_promptly_processing_time",
                    "test_late_attempt_of_the_last_available_now_batch",
                    "test_late_attempt_of_a_batch_write")},
}


def unit_of(nodeid: str) -> str:
    """The xdist unit (under ``--dist loadfile``) a test runs in: its file, or the unit it joins."""
    file = nodeid.split("::", 1)[0]
    return _SHARED_UNITS.get(nodeid, _SHARED_UNITS.get(file, file))


_UNIT_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report) -> None:
    """Seconds per unit (setup, call and teardown), summed where the reports arrive: in the
    controller under xdist."""
    unit = unit_of(report.nodeid)
    _UNIT_SECONDS[unit] = _UNIT_SECONDS.get(unit, 0.0) + report.duration


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedResourceScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return SharedResourceScheduling(config, log)


def pytest_sessionfinish(session) -> None:
    """In an xdist worker: hand the chaos campaigns' results to the controller, which prints them."""
    from integration_tests.chaos.summary import CI_RESULTS

    if CI_RESULTS and hasattr(session.config, "workeroutput"):
        session.config.workeroutput["txkafka_chaos"] = [r.to_json() for r in CI_RESULTS]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    from integration_tests.chaos.summary import CI_RESULTS, CampaignResult

    worker_output = getattr(node, "workeroutput", {}) or {}
    CI_RESULTS.extend(CampaignResult.from_json(d) for d in worker_output.get("txkafka_chaos", []))


def pytest_terminal_summary(terminalreporter):
    """Print the chaos suite's summary (rounds, kills, injection points hit, records verified) and
    the costliest units; every unit's seconds go to results/test-units.json."""
    from integration_tests.chaos.summary import terminal_summary

    terminal_summary(terminalreporter)
    if not _UNIT_SECONDS:
        return
    units = dict(sorted(_UNIT_SECONDS.items(), key=lambda kv: -kv[1]))
    Path("results").mkdir(exist_ok=True)
    Path("results/test-units.json").write_text(
        json.dumps({u: round(s, 1) for u, s in units.items()}, indent=1) + "\n")
    terminalreporter.write_sep("=", "costliest test units (seconds, setup to teardown)")
    for unit, seconds in list(units.items())[:15]:
        terminalreporter.write_line(f"{seconds:8.0f}  {unit}")
