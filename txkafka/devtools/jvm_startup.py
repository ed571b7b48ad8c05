"""Faster Spark driver start-up through a class-data-sharing (CDS) archive of Spark's JVM.

Why: a local Spark driver spends most of its start loading and verifying the same ~20,000 classes
every time. The tests, the chaos suite and the demo start dozens of drivers (every crash is a
restart), so the JDK's dynamic CDS archive (JDK 13+: ``-XX:ArchiveClassesAtExit`` once, then
``-XX:SharedArchiveFile``) saves a large part of each start and of its first job.

The archive is made once per JDK and Spark installation by a short warm-up driver that runs the
kinds of queries txkafka runs (a Python data source, batch and streaming), and is cached with the
Kafka jars. It is an accelerator only: the JVM validates it (same JDK build, same jars) and
silently starts without it on any mismatch, and when it cannot be built nothing changes.

Spark's launcher adds ``SPARK_SUBMIT_OPTS`` to a client-mode driver's JVM, and child processes
inherit it, so one call at the start of a test session or the demo covers every driver it starts.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from ..cache import cache_dir, file_lock

# A mismatched or unreadable archive only logs a warning, on stdout: keep drivers' output clean.
_QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"
_DISABLE_ENV = "TXKAFKA_NO_CDS"

_WARMUP = r'''
import sys, tempfile
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    DataSourceStreamWriter, InputPartition, WriterCommitMessage)
from txkafka.spark_session import session_builder

class _Reader(DataSourceReader):
    def read(self, partition):
        yield from ((i, str(i)) for i in range(100))

class _StreamReader(DataSourceStreamReader):
    def initialOffset(self):
        return {"n": 0}
    def latestOffset(self):
        return {"n": 2}
    def partitions(self, start, end):
        return [InputPartition(i) for i in range(start["n"], end["n"])]
    def read(self, partition):
        yield (partition.value, str(partition.value))

class _StreamWriter(DataSourceStreamWriter):
    def write(self, iterator):
        for _ in iterator:
            pass
        return WriterCommitMessage()
    def commit(self, messages, batchId):
        pass
    def abort(self, messages, batchId):
        pass

class Warmup(DataSource):
    @classmethod
    def name(cls):
        return "txkafka_cds_warmup"
    def schema(self):
        return "id int, value string"
    def reader(self, schema):
        return _Reader()
    def streamReader(self, schema):
        return _StreamReader()
    def streamWriter(self, schema, overwrite):
        return _StreamWriter()

spark = session_builder("txkafka-cds-warmup").getOrCreate()
spark.dataSource.register(Warmup)
df = spark.range(1000)
df.groupBy((df.id % 3).alias("k")).count().collect()
spark.read.format("txkafka_cds_warmup").load().selectExpr("CAST(id AS STRING) AS key").collect()
q = (spark.readStream.format("txkafka_cds_warmup").load()
     .selectExpr("CAST(id AS STRING) AS key", "value").writeStream.format("txkafka_cds_warmup")
     .option("checkpointLocation", tempfile.mkdtemp()).trigger(availableNow=True).start())
q.awaitTermination(120)
spark.stop()
# The JVM writes the archive as it exits; it exits when its stdin closes. Wait for it, so the
# archive is complete when this script returns.
from pyspark import SparkContext
jvm = SparkContext._gateway.proc
jvm.stdin.close()
sys.exit(0 if jvm.wait(120) == 0 else 3)
'''


def _fingerprint() -> str | None:
    """JDK build + Spark's jars: what the JVM checks before it trusts an archive."""
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) \
        if os.environ.get("JAVA_HOME") else shutil.which("java")
    # Located, never imported: this runs on a background thread (integration_tests/jvm_archive.py)
    # while the main thread may be importing pyspark, and two threads importing pyspark's
    # circular package imports at once leave one of them with a half-initialised pyspark.sql.
    spec = importlib.util.find_spec("pyspark")
    if java is None or spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(list(spec.submodule_search_locations)[0]) / "jars"
    h = hashlib.sha256()
    real_java = os.path.realpath(java)
    st = os.stat(real_java)
    h.update(f"{real_java}:{st.st_size}:{st.st_mtime_ns}".encode())
    for jar in sorted(jars.glob("*.jar")):
        s = jar.stat()
        h.update(f"{jar.name}:{s.st_size}:{s.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def spark_archive(progress: Callable[[str], None] | None = None, timeout: float = 240.0) -> Path | None:
    """The CDS archive for this JDK and Spark, built on first use; None if it cannot be had."""
    key = _fingerprint()
    if key is None:
        return None
    archive = cache_dir() / "cds" / f"spark-driver-{key}.jsa"
    if archive.exists():
        return archive
    with file_lock(archive.with_suffix(".lock")):
        if archive.exists():
            return archive
        say = progress or (lambda m: print(f"[txkafka] {m}", file=sys.stderr, flush=True))
        say("building a class-data-sharing archive of Spark's JVM (once, about a minute): faster "
            "driver starts")
        started = time.monotonic()
        tmp = archive.with_name(f".{archive.name}.{os.getpid()}.tmp")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={tmp} {_QUIET_CDS}"}
        with tempfile.TemporaryDirectory(prefix="txkafka-cds-") as work:
            try:
                proc = subprocess.run([sys.executable, "-c", _WARMUP], env=env, cwd=work,
                                      capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                proc = None
        if proc is None or proc.returncode != 0 or not tmp.exists():
            tmp.unlink(missing_ok=True)
            why = "timed out" if proc is None else (proc.stderr or "").strip()[-400:]
            say(f"no class-data-sharing archive (drivers start at normal speed): {why}")
            return None
        os.replace(tmp, archive)
        say(f"class-data-sharing archive ready in {time.monotonic() - started:.0f}s")
        return archive


def use_spark_archive(progress: Callable[[str], None] | None = None) -> bool:
    """Make every Spark driver this process (and its children) starts use the archive."""
    if os.environ.get(_DISABLE_ENV):
        return False
    archive = spark_archive(progress)
    if archive is None:
        return False
    opt = f"-XX:SharedArchiveFile={archive}"
    current = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if opt not in current:
        os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [current, opt, _QUIET_CDS]))
    return True
