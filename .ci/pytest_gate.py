"""Run the test suite, then its Kafka version matrix; "no tests collected" (pytest exit 5) is a
failure, not a pass.

1. Every test against the newest Apache Kafka tested (or ``TXKAFKA_KAFKA_VERSION`` when set).
2. The tests marked ``kafka_matrix`` (single-broker exactly-once, reader transactions, recovery)
   again against the oldest Apache Kafka tested, the oldest the exactly-once sink supports.
   ``TXKAFKA_KAFKA_MATRIX=0`` leaves this run out, and so does ``TXKAFKA_BOOTSTRAP`` (the tests
   then use that cluster, whatever its version). With arguments that select other tests, a
   matrix run that selects none is no error; without arguments it must select some.

Each run uses three xdist workers: the first a test file at a time on one worker (``--dist
loadfile``: the chaos campaigns and the summary test after them stay together, in order), the
matrix a test at a time (``--dist load``). A test's driver waits on Spark and Kafka much of the
time, so three streams keep the machine's two cores busy (a fourth would only add load). ``-n 0``
(or another ``-n``) in the arguments overrides this.

Spark's Python processes import the installed pyspark, with pip's bytecode, instead of
``$SPARK_HOME/python/lib/pyspark.zip`` (txkafka/devtools/spark_home_for_tests.py: a Spark home linked to
the installed one without that zip, exported as SPARK_HOME for both runs; the effect of ``txkafka
pyspark-bytecode enable`` without writing into the environment). Each process Spark starts
otherwise compiles pyspark again and, on Python 3.11, re-reads the zip's directory once per package.
The code they run is the same. The stock layout is still what runs in
integration_tests/test_spark_python_imports.py, the packaging tests (new environments, a
standalone cluster's executors) and ``make demo``.
``TXKAFKA_TEST_SPARK_HOME=stock`` runs everything on the stock layout; a SPARK_HOME already set is
used as it is. The repository's own modules are compiled first (``compileall``): a machine that sets
PYTHONDONTWRITEBYTECODE would otherwise compile them in every process. Spark drivers and the
embedded brokers run with the JIT's first tier only (``TXKAFKA_TEST_JIT=full``: the JVM's default).
Their ``java.io.tmpdir`` is a folder of the run, deleted at its end: a JVM the tests kill (a broker
or driver crash) leaves what it had extracted there (lz4-java's native library, 150 KB each time).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

from txkafka.embedded_kafka import BROKER_JVM_OPTIONS_ENV, KAFKA_VERSION, OLDEST_TESTED_KAFKA

NO_TESTS_COLLECTED = 5


def _pytest(args: list[str], env: dict[str, str], dist: str = "loadfile") -> int:
    """One pytest run in a fresh process (the Kafka version is read at import time)."""
    if not any(a.startswith(("-n", "--numprocesses", "--dist")) for a in args):
        args = ["-n", "3", "--dist", dist, *args]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *args], env=env).returncode


def _say(msg: str) -> None:
    print(f"[pytest-gate] {msg}", flush=True)


def _with_test_spark_home(env: dict[str, str]) -> dict[str, str]:
    """``env`` with SPARK_HOME at the tests' Spark home (built once per pyspark), unless the caller
    chose a home or the stock layout."""
    if env.get("SPARK_HOME"):
        _say(f"Spark home: {env['SPARK_HOME']} (SPARK_HOME)")
        return env
    if env.get("TXKAFKA_TEST_SPARK_HOME") == "stock":
        _say("Spark home: the installed pyspark, stock (TXKAFKA_TEST_SPARK_HOME=stock)")
        return env
    from txkafka.devtools.spark_home_for_tests import build
    from txkafka.pyspark_home import PysparkHomeError

    try:
        home = build()
    except PysparkHomeError as e:  # the tests run as well on the stock layout, only slower
        _say(f"Spark home: the installed pyspark, stock ({e})")
        return env
    _say(f"Spark home: {home} (Spark's Python processes import the installed pyspark; "
         "TXKAFKA_TEST_SPARK_HOME=stock: the stock one)")
    return {**env, "SPARK_HOME": str(home)}


# Compiled once here, read by every process the suite starts (PYTHONDONTWRITEBYTECODE only stops
# imports from writing bytecode; compileall writes it, and skips what is up to date).
_SOURCES = ("connector", "python_datasource", "txkafka", "pyspark_txkafka.py", "tests",
            "integration_tests", "conftest.py")


def _compile_sources() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0",
                    *[os.path.join(root, s) for s in _SOURCES]], check=True)


# The JIT's first tier only (C1), for Spark drivers (SPARK_SUBMIT_OPTS, silent, unlike
# JAVA_TOOL_OPTIONS) and the embedded brokers: the tests' JVMs are short-lived and move little
# data, so the optimising compiler's work rarely pays back on two cores.
_C1_ONLY = "-XX:TieredStopAtLevel=1"


def _with_test_jvm_options(env: dict[str, str]) -> dict[str, str]:
    if env.get("TXKAFKA_TEST_JIT") == "full":
        _say("JVMs: the full JIT (TXKAFKA_TEST_JIT=full)")
        return env
    _say(f"JVMs: {_C1_ONLY} for Spark drivers and brokers (TXKAFKA_TEST_JIT=full: the default)")
    return _with_jvm_option(env, _C1_ONLY)


def _with_jvm_option(env: dict[str, str], option: str) -> dict[str, str]:
    """``option`` added to the Spark drivers' and the brokers' JVM options."""
    return {**env, **{key: " ".join(filter(None, [env.get(key), option]))
                      for key in ("SPARK_SUBMIT_OPTS", BROKER_JVM_OPTIONS_ENV)}}


def main(args: list[str]) -> int:
    jvm_tmp = tempfile.mkdtemp(prefix="txkafka-test-jvms-")
    try:
        return _run(args, jvm_tmp)
    finally:
        shutil.rmtree(jvm_tmp, ignore_errors=True)


def _run(args: list[str], jvm_tmp: str) -> int:
    started = time.monotonic()
    _compile_sources()
    env = _with_jvm_option(_with_test_jvm_options(_with_test_spark_home(dict(os.environ))),
                           f"-Djava.io.tmpdir={jvm_tmp}")
    _say(f"all tests, Apache Kafka {KAFKA_VERSION}")
    # The slowest tests in the log: what to look at when the run nears CI's time budget.
    code = _pytest(["--durations=30", *args], env)
    if code == NO_TESTS_COLLECTED:
        print("error: pytest collected no tests", file=sys.stderr)
        return 1
    _say(f"all tests: exit {code} after {time.monotonic() - started:.0f}s")
    skip = ("TXKAFKA_KAFKA_MATRIX=0" if os.environ.get("TXKAFKA_KAFKA_MATRIX") == "0"
            else "TXKAFKA_BOOTSTRAP names the cluster" if os.environ.get("TXKAFKA_BOOTSTRAP")
            else f"the run above used Kafka {KAFKA_VERSION}" if KAFKA_VERSION == OLDEST_TESTED_KAFKA
            else "")
    if skip:
        _say(f"version matrix: not run ({skip})")
        return code
    matrix_started = time.monotonic()
    _say(f"version matrix: tests marked kafka_matrix, Apache Kafka {OLDEST_TESTED_KAFKA}")
    # A test at a time: most of its tests are in one file, which loadfile would give one worker.
    matrix = _pytest([*(args or ["integration_tests"]), "-m", "kafka_matrix"],
                     {**env, "TXKAFKA_KAFKA_VERSION": OLDEST_TESTED_KAFKA}, dist="load")
    if matrix == NO_TESTS_COLLECTED:
        if not args:
            print("error: the version matrix collected no tests (marker kafka_matrix)",
                  file=sys.stderr)
            return 1
        _say("version matrix: the arguments select none of its tests")
        matrix = 0
    _say(f"version matrix: exit {matrix} after {time.monotonic() - matrix_started:.0f}s")
    return code or matrix


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
