"""``python -m txkafka.devtools bench``: txkafka against Spark's built-in Kafka connector and the client's own ceiling.

Everything runs in one session on one broker, and every comparison is a ratio of medians of runs
interleaved in the same session (A, B, C, A, B, C, ...), so machine drift cancels. Results go to a
JSON file and PNG charts; ``--report`` turns a result file into the tables of docs/benchmarks.md.

Suites:
- read: txkafka vs the built-in ``kafka`` source, same topic, Trigger.AvailableNow into a noop sink;
- write: Kafka -> Spark -> Kafka with a 1 s trigger into txkafka exactly_once, txkafka at_least_once
  and the built-in sink (at least once), all reading the input with the same reader;
- latency: records produced at a steady rate, timed until a read_committed consumer of the output
  sees them (txkafka exactly_once at 1 s and 5 s triggers);
- sink: a batch ``df.write`` of a cached DataFrame into each sink, beside a Python writer that
  only drains its input (what Spark's side costs before any sink's work);
- ceiling: a plain confluent-kafka producer and consumer loop (no Spark);
- core: txkafka's connector without Spark against that ceiling: the range reader into Arrow, and
  the exactly-once writer from Arrow batches through one transaction and the driver's commit;
- scaling: txkafka read and exactly-once write over 1, 4 and 16 partitions and 100 B, 1 KB, 10 KB values;
- tasks: per-batch time against the number of write tasks (``repartition(P)``) for the built-in
  sink, a drain-only Python writer, ``mapInArrow`` + noop and txkafka
  (txkafka/devtools/bench_tasks.py).

No run publishes a figure for work it cannot prove done: a Spark query must have read exactly its
rows, an output must hold exactly its rows by a read_committed count, and a latency window must
have received every record sent in it; anything else stops the benchmark with the counts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .. import kafka_admin
from ..cli_options import CommandLineError, KafkaConnection, add_kafka_options
from ..connector.secrets_redaction import redact_command_line, redact_config
from ..kafka_admin import QUIET
from ..spark_session import session_builder
from .bench_runs import (
    EOS_LABELS,
    LIBRDKAFKA,
    PRODUCERS,
    PROGRESS_KEPT,
    TXKAFKA_READ_OPTIONS,
    _SINKS,
    _rotated,
    _run_query,
    check_count,
    producers_of,
)


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------- Kafka helpers

class BenchKafka:
    def __init__(self, conn: KafkaConnection) -> None:
        self.bootstrap = conn.bootstrap
        self.conf = dict(conn.client_conf)     # the plain clients'
        self.options = conn.query_options      # the queries' kafka.* options
        self.admin = kafka_admin.admin(self.conf)
        self.created: list[str] = []  # deleted at the end on a cluster the bench did not start

    def topic(self, prefix: str, partitions: int, config: dict[str, str] | None = None) -> str:
        name = kafka_admin.create_topic(self.conf, f"{prefix}-{uuid.uuid4().hex[:8]}", partitions,
                                        config=config)
        self.created.append(name)
        return name

    def drop(self, name: str) -> None:
        """Delete one checked output now (best effort): big topics (the size runs' 500
        partitions, 1 MB records) would otherwise pile up on the one broker run after run."""
        if kafka_admin.delete_topics(self.conf, [name]).get(name) is None:
            self.created.remove(name)

    def delete_created(self) -> None:
        """Best effort: a failed delete leaves a topic behind, never fails the run."""
        if not self.created:
            return
        say(f"deleting the {len(self.created)} topics the benchmark created")
        try:
            failed = kafka_admin.delete_topics(self.conf, self.created)
        except Exception as e:  # noqa: BLE001
            say(f"  could not delete them: {e}")
            return
        for name, e in failed.items():
            say(f"  could not delete {name}: {e}")
        self.created = []

    def fill(self, topic: str, rows: int, value_bytes: int) -> float:
        """Produce ``rows`` keyed records as fast as librdkafka takes them; returns rows/s.

        Keys and the value are built before the timer, as txkafka's writer gets its Arrow
        batches prebuilt, so the plain client's loop does nothing but produce."""
        p = kafka_admin.producer(self.conf, **{
            "linger.ms": 20, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none", "enable.idempotence": True})
        payload = (os.urandom(value_bytes // 2 + 1).hex().encode())[:value_bytes]
        keys = [b"k%09d" % i for i in range(rows)]
        produce = p.produce
        started = time.monotonic()
        for key in keys:
            try:
                produce(topic, payload, key)
            except BufferError:
                p.poll(0.05)
                produce(topic, payload, key)
        left = p.flush(300)
        elapsed = time.monotonic() - started
        if left:
            raise RuntimeError(f"{left} records not delivered while filling {topic}")
        # flush() does not count records that failed delivery; the offsets do (a fresh,
        # non-transactional topic holds exactly what was acknowledged).
        check_count(f"filling {topic}", self.offsets_held(topic), rows)
        return rows / elapsed

    def consume_all(self, topic: str, expected: int) -> float:
        """Read ``expected`` records with a plain consumer loop; returns rows/s."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        from ..connector.source.options import FETCH_QUEUE_BACKOFF_MS

        md = self.admin.list_topics(topic, timeout=30)
        parts = sorted(md.topics[topic].partitions)
        c = Consumer({**self.conf, "group.id": f"bench-{uuid.uuid4()}",
                      "enable.partition.eof": True, "enable.auto.commit": False,
                      "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
                      # As txkafka's reader: without it librdkafka idles a second per 100k
                      # queued records and the "ceiling" would be a third of the client's.
                      "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS, "logger": QUIET})
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        n = 0
        pending = set(parts)
        started = time.monotonic()
        deadline = started + 600
        # Done at the expected count (as txkafka's ranges end on their last offset), else at EOF
        # everywhere: waiting for EOF adds the broker's empty long-poll (fetch.wait.max.ms).
        while pending and n < expected and time.monotonic() < deadline:
            msgs = c.consume(10000, 1.0)
            events = [m for m in msgs if m.error()]
            n += len(msgs) - len(events)
            for m in events:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
        elapsed = time.monotonic() - started
        c.close()
        check_count(f"ceiling consume of {topic}", n, expected)
        return n / elapsed

    def end_offsets(self, topic: str, parts: list[int]) -> dict[int, int]:
        ends = kafka_admin.end_offsets(self.conf, topic, "read_uncommitted")
        return {p: ends[p] for p in parts}

    def offsets_held(self, topic: str) -> int:
        """Offsets below the high watermarks: the record count of a non-transactional topic."""
        marks = kafka_admin.watermarks(self.conf, topic, "read_uncommitted")
        return sum(hi - lo for lo, hi in marks.values())

    def wait_visible(self, what: str, topic: str, rows: int, timeout: float = 120.0) -> None:
        """Return once everything written to ``topic`` is visible to read_committed readers.

        Call it after the writer finished: then "visible" means no partition has an open
        transaction (its last stable offset has reached its high watermark) and the offsets
        hold at least ``rows`` records. EndTxn returns once the coordinator has logged the
        commit and the markers follow, so the last stable offsets move a moment later; this is
        the part of a run's timing that makes "written" mean "readable". Cheap (offset
        requests only): the exact count, which would add seconds, is ``check_output``'s.
        """
        from confluent_kafka import Consumer, TopicPartition

        def consumer(isolation: str):
            return Consumer({**self.conf, "logger": QUIET,
                             "group.id": f"bench-{uuid.uuid4()}", "isolation.level": isolation})

        committed, raw = consumer("read_committed"), consumer("read_uncommitted")
        try:
            parts = [TopicPartition(topic, p) for p in
                     sorted(raw.list_topics(topic, timeout=30).topics[topic].partitions)]
            deadline = time.monotonic() + timeout
            while True:
                held = open_parts = 0
                for tp in parts:
                    _, hw = raw.get_watermark_offsets(tp, timeout=30, cached=False)
                    lo, lso = committed.get_watermark_offsets(tp, timeout=30, cached=False)
                    held += lso - lo
                    open_parts += lso < hw
                if not open_parts and held >= rows:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{what}: {topic} did not become visible to read_committed in "
                        f"{timeout:.0f}s ({open_parts} partitions with an open transaction, "
                        f"{held:,} offsets below the last stable offsets, {rows:,} records expected)")
                time.sleep(0.02)
        finally:
            committed.close()
            raw.close()

    def check_output(self, what: str, topic: str, rows: int) -> None:
        """Count ``topic``'s records as a read_committed consumer sees them (markers and aborted
        records excluded) and require exactly ``rows``. Untimed: about 2 s per million records."""
        got = sum(1 for _ in kafka_admin.scan_topic(self.conf, topic, timeout_s=300))
        check_count(f"{what}, its output {topic} read with read_committed", got, rows)


# ----------------------------------------------------------------------------- core runs (no Spark)

def _arrow_batches(rows: int, value_bytes: int, batch_rows: int = 10_000) -> list:
    """The rows a Spark task would hand the writer: Arrow batches of binary keys and values."""
    import numpy as np
    import pyarrow as pa

    payload = (os.urandom(value_bytes // 2 + 1).hex().encode())[:value_bytes]
    out = []
    for start in range(0, rows, batch_rows):
        n = min(batch_rows, rows - start)
        keys = pa.array([b"k%09d" % i for i in range(start, start + n)], pa.binary())
        offsets = np.arange(n + 1, dtype=np.int32) * np.int32(value_bytes)
        values = pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                              pa.py_buffer(payload * n)])
        out.append(pa.record_batch([keys, values], names=["key", "value"]))
    return out


def core_write_run(k: BenchKafka, batches: list, rows: int, workdir: str) -> float:
    """txkafka's exactly-once writer without Spark: one task's transaction (init, produce from
    Arrow, flush, pre-commit) plus the driver's commit (validation, decision record, EndTxn),
    timed until the records are visible to read_committed (the plain producer's are at ack)."""
    from ..connector.sink.committable import TaskResult
    from ..connector.sink.committer import KafkaCommitter
    from ..connector.sink.task_writer import KafkaWriter, validate_input_schema
    from ..connector.sink.commit_log import SinkCommitLog
    from ..connector.sink.options import SinkConfig
    from ..connector.sink.transactional_ids import TransactionalIdFactory

    topic = k.topic("bench-core-out", 4)
    ck = tempfile.mkdtemp(dir=workdir)
    cfg = SinkConfig.from_options({**k.options, "topic": topic,
                                   "checkpointLocation": ck}, streaming=True)
    log = SinkCommitLog(ck)
    ids = TransactionalIdFactory(cfg.transactional_id_prefix,
                                 log.identity(cfg.transactional_id_prefix).sink_id)
    schema = validate_input_schema({"key": "binary", "value": "binary"}, cfg.topic)
    committer = KafkaCommitter(cfg, ids, log)
    started = time.monotonic()
    w = KafkaWriter(cfg, schema, batch_id=0, partition_id=0, attempt=0,
                    transactional_id=ids.transactional_id(0, 0))
    committable = w.write(batches)
    w.release()
    committer.commit(0, [TaskResult(0, 0, 0, committable, w.count)])
    k.wait_visible("core write", topic, rows)
    elapsed = time.monotonic() - started
    k.check_output("core write", topic, rows)
    return rows / elapsed


def core_read_run(k: BenchKafka, topic: str, rows: int) -> float:
    """txkafka's range reader without Spark: every partition's range into Arrow batches, one after
    the other in one thread (as one task per partition would)."""
    from ..connector.source.range_reader import ConsumerPool, FetchTask, fetch_range
    from ..connector.source.options import parse_source_options

    options = parse_source_options({**k.options, "subscribe": topic,
                                    **TXKAFKA_READ_OPTIONS}, streaming=True)
    conf = tuple(sorted(options.consumer_config().items()))
    ends = kafka_admin.end_offsets(k.conf, topic, "read_uncommitted")
    parts = sorted(ends)
    pool = ConsumerPool()
    n = 0
    started = time.monotonic()
    try:
        for p in parts:
            task = FetchTask(topic, p, 0, ends[p], conf, 120_000, True, False, options.fetcher)
            n += sum(b.num_rows for b in fetch_range(task, pool))
    finally:
        pool.close_all()
    elapsed = time.monotonic() - started
    check_count("core read", n, rows)
    return n / elapsed


# ----------------------------------------------------------------------------- Spark runs

def spark_conf_pairs(pairs: list[str]) -> dict[str, str]:
    """``--spark-conf KEY=VALUE`` arguments as a dict; a pair without '=' is refused by its
    number (not echoed: "spark.hadoop.fs.s3a.secret.key:..." would print the secret)."""
    out = {}
    for n, pair in enumerate(pairs, 1):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--spark-conf number {n}: expected KEY=VALUE, e.g. "
                             "spark.python.unix.domain.socket.enabled=true")
        out[key.strip()] = value
    return out


def command_line(argv: Sequence[str]) -> str:
    """The ``python -m txkafka.devtools bench`` command a result file records (to rerun it; empty when the bench
    ran otherwise), without the values of its secrets (``-X sasl.password=...``)."""
    if list(argv[1:2]) != ["bench"]:
        return ""
    return redact_command_line(["python", "-m", "txkafka.devtools", "bench", *argv[2:]])


def spark_session(builtin: bool, master: str, conf: dict[str, str] | None = None):
    import pyspark

    if builtin:
        from ..spark_kafka_packages import builtin_kafka_conf, connector_jar

        say(f"loading Spark's built-in Kafka connector "
            f"({connector_jar(builtin_kafka_conf())}; the first run downloads it through "
            f"Maven; pyspark is {pyspark.__version__})")
    spark = session_builder("txkafka-bench", master, {
        "spark.ui.showConsoleProgress": "false",
        # Every progress report is kept, so a run's numInputRows add up to what it read.
        "spark.sql.streaming.numRecentProgressUpdates": str(PROGRESS_KEPT),
        "spark.driver.memory": "3g",
        **(conf or {}),
    }, spark_kafka=builtin).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _data_batch_rate(q: Any) -> float:
    """Rows/s inside the micro-batches that read rows (Spark's triggerExecution), i.e. the data
    path without the query's start and stop: where a connector's per-query costs differ (a
    Python data source starts a Python planner process), this separates them from throughput."""
    progress = [p for p in q.recentProgress if p.get("numInputRows")]
    ms = sum(p["durationMs"].get("triggerExecution", 0) for p in progress)
    return sum(p["numInputRows"] for p in progress) / (ms / 1000.0) if ms else float("nan")


# The read suite's name for the minimal Python source whose query start it times (bench_tasks).
FLOOR = "python_floor"


def read_run(spark, fmt: str, kafka: Mapping[str, str], topic: str, rows: int,
             workdir: str) -> float:
    return read_run_detailed(spark, fmt, kafka, topic, rows, workdir)[0]


def read_run_detailed(spark, fmt: str, kafka: Mapping[str, str], topic: str, rows: int,
                      workdir: str) -> tuple[float, float, float]:
    """(rows/s over the whole query, rows/s inside its data batches, seconds from ``start()`` to
    its first batch); ``kafka``: the query's kafka.* options."""
    src = (spark.readStream.format(fmt).options(**kafka)
           .option("subscribe", topic).option("startingOffsets", "earliest")
           .options(**(TXKAFKA_READ_OPTIONS if fmt == "txkafka" else {})))
    rate, q, began = _available_now_into_noop(f"read {fmt}", src, rows, workdir)
    return rate, _data_batch_rate(q), _first_batch_after(q, began)


def floor_start_run(spark, workdir: str) -> float:
    """Seconds from ``start()`` to the first batch of a one-row query from the bench's minimal
    Python streaming source (bench_tasks.FloorSource, registered by the caller)."""
    from .bench_tasks import FLOOR_FORMAT

    _, q, began = _available_now_into_noop(f"read {FLOOR}", spark.readStream.format(FLOOR_FORMAT),
                                           1, workdir)
    return _first_batch_after(q, began)


def _available_now_into_noop(what: str, reader: Any, rows: int, workdir: str
                             ) -> tuple[float, Any, float]:
    """Run ``reader``'s stream with Trigger.AvailableNow into ``noop`` (``_run_query``'s checks);
    returns (rows/s, the query, the wall-clock time just before ``start()``)."""
    began: list[float] = []

    def start():
        src = reader.load()
        began.append(time.time())
        return (src.writeStream.format("noop").trigger(availableNow=True)
                .option("checkpointLocation", tempfile.mkdtemp(dir=workdir)).start())
    rate, q = _run_query(what, start, rows, 900)
    return rate, q, began[0]


def _first_batch_after(q: Any, began: float) -> float:
    """Seconds from wall-clock ``began`` to the query's first trigger (its progress timestamp,
    Spark's clock in milliseconds)."""
    first = datetime.datetime.fromisoformat(q.recentProgress[0]["timestamp"].replace("Z", "+00:00"))
    return first.timestamp() - began


def write_run(spark, sink: str, k: BenchKafka, src_topic: str, rows: int, workdir: str,
              partitions: int, per_batch: int, trigger: str = "1 second") -> float:
    out = k.topic("bench-out", partitions) if sink != "noop" else None

    def start():
        src = (spark.readStream.format("txkafka").options(**k.options)
               .option("subscribe", src_topic).option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", str(per_batch)).options(**TXKAFKA_READ_OPTIONS)
               .load())
        w = src.selectExpr("key", "value").writeStream.trigger(processingTime=trigger)
        w = w.option("checkpointLocation", tempfile.mkdtemp(dir=workdir))
        if sink == "noop":
            w = w.format("noop")
        else:
            fmt, options = _SINKS[sink]
            w = (w.format(fmt).options(**k.options).option("topic", out)
                 .options(**options))
        q = w.start()
        return _StopWhenDone(q, rows)

    what = f"write {sink}"
    rate, _ = _run_query(what, start, rows, 900,
                         (lambda: k.wait_visible(what, out, rows)) if out else None)
    if out:
        k.check_output(what, out, rows)
    return rate


def sink_frame(spark, rows: int, value_bytes: int = 100):
    """The sink suite's input: keyed rows of ``value_bytes`` over 4 partitions, cached in Spark's
    memory, so a timed write measures the sink and not a source."""
    filler = max(0, value_bytes - 10)
    df = spark.range(rows, numPartitions=4).selectExpr(
        "cast(format_string('k%09d', id) as binary) as key",
        f"cast(concat(format_string('%010d', id), repeat('x', {filler})) as binary) as value")
    df = df.cache()
    df.count()
    return df


def sink_run(k: BenchKafka, sink: str, df, rows: int, partitions: int = 4,
             value_bytes: int = 100, meter: Any = None, cpu: list | None = None,
             request_log: Path | None = None, produced: list | None = None) -> float:
    """A batch ``df.write`` of the cached frame into a new topic of ``partitions``, timed until
    every row is visible to read_committed: the sink in Spark, without a Kafka source in front.

    With a ``meter`` (bench_tasks.CpuMeter), the run's CPU microseconds per row by process group
    (the checker's read-back left out) are appended to ``cpu``; with the broker's
    ``request_log``, the run's Produce requests as the broker counted them
    (:func:`produce_requests`) to ``produced``."""
    from .bench_tasks import cpu_delta

    def measured(before: Any) -> None:
        if before is not None and cpu is not None:
            used = cpu_delta(before, meter.snapshot())
            cpu.append({g: round(v / rows * 1e6, 3) for g, v in used.items()})

    if sink == "drain":
        before = meter.snapshot() if meter is not None else None
        rate = _drain_sink_run(df, rows)
        measured(before)
        return rate
    fmt, options = _SINKS[sink]
    big = value_bytes > 900_000  # Kafka's and the producers' default limits are about 1 MB
    out = k.topic("bench-sink", partitions,
                  {"max.message.bytes": str(4 * value_bytes)} if big else None)
    before = meter.snapshot() if meter is not None else None
    log_from = request_log.stat().st_size if request_log is not None else 0
    started = time.monotonic()
    w = df.write.format(fmt).options(**k.options).option("topic", out)
    if big:
        w = w.option("kafka.max.request.size" if fmt == "kafka" else "kafka.message.max.bytes",
                     str(4 * value_bytes))
    w.options(**options).mode("append").save()
    k.wait_visible(f"sink {sink}", out, rows)
    elapsed = time.monotonic() - started
    measured(before)
    if request_log is not None and produced is not None:
        produced.append(produce_requests(request_log, log_from))
    k.check_output(f"sink {sink}", out, rows)
    if big or partitions > 16:
        k.drop(out)
    return rows / elapsed


def produce_requests(request_log: Path, start: int) -> dict[str, int]:
    """The Produce requests a broker logged (Kafka's request log at DEBUG: one JSON line per
    completed request, records shown by size) from byte ``start`` of its log on: how many, how
    many carried no partition at all, their record bytes. A producer's requests per run and bytes
    per request show what its sender costs the broker's request handlers, whatever the rows/s."""
    with open(request_log, "rb") as fh:
        fh.seek(start)
        text = fh.read()
    requests = empty = nbytes = 0
    for line in text.splitlines():
        if b'"requestApiKey":0,' not in line:
            continue
        requests += 1
        empty += b'"topicData":[]' in line
        nbytes += sum(int(n) for n in re.findall(rb'"recordsSizeInBytes":(\d+)', line))
    return {"requests": requests, "empty": empty, "bytes": nbytes}


def _drain_sink_run(df, rows: int) -> float:
    """The same ``df.write`` into a Python writer that only drains its input (the tasks suite's,
    in batch form): what Spark's cached read and its hand-over to Python cost before any sink's
    work. Its ledger must account for every row."""
    from .bench_tasks import DRAIN_FORMAT, read_ledger

    ledger = os.path.join(tempfile.gettempdir(), f"txkafka-drain-{uuid.uuid4().hex[:8]}.jsonl")
    started = time.monotonic()
    df.write.format(DRAIN_FORMAT).option("ledger", ledger).mode("append").save()
    elapsed = time.monotonic() - started
    check_count("sink drain, rows its commit accounts for",
                sum(b["rows"] for b in read_ledger(ledger)), rows)
    os.unlink(ledger)
    return rows / elapsed


class _StopWhenDone:
    """Wraps a processing-time query: it 'terminates' once its input rows have all been processed."""

    def __init__(self, q, rows: int) -> None:
        self.q = q
        self.rows = rows

    def awaitTermination(self, timeout: float | None = None) -> bool:
        deadline = time.monotonic() + (timeout or 3600)
        while time.monotonic() < deadline:
            if self.q.exception() is not None:
                return True
            done = sum(p.get("numInputRows", 0) for p in self.q.recentProgress)
            if done >= self.rows and not self.q.status.get("isTriggerActive"):
                self.q.stop()
                return True
            time.sleep(0.1)
        return False

    @property
    def isActive(self) -> bool:
        return self.q.isActive

    @property
    def recentProgress(self) -> list[dict]:
        return self.q.recentProgress

    def stop(self) -> None:
        self.q.stop()

    def exception(self):
        return self.q.exception()


def _stop_between_batches(q, wait_s: float = 15.0) -> None:
    """Stop a processing-time query between two batches: stopped mid-batch, Spark cancels its
    tasks and logs each cancellation as an ERROR with a stack trace, which reads like a failure."""
    deadline = time.monotonic() + wait_s
    while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.02)
    q.stop()


def check_latency_samples(what: str, samples: int, sent: int, duplicates: int, rate: int,
                          seconds: float) -> None:
    """Percentiles only over a complete window: every record sent in it received once, and the
    feeder having kept (95 % of) its rate. A stalled or dead query delivers the early, fast
    records and loses the slow ones, which would read as an optimistic tail."""
    if duplicates:
        raise RuntimeError(f"{what}: {duplicates:,} records of the window were received twice")
    if samples < sent:
        raise RuntimeError(f"{what}: {sent - samples:,} of the {sent:,} records sent in the "
                           f"{seconds:.0f} s window never reached the read_committed consumer "
                           "(a stalled or failed query?)")
    if samples < 0.95 * rate * seconds:
        raise RuntimeError(f"{what}: {samples:,} records in the {seconds:.0f} s window, fewer than "
                           f"95 % of {rate:,}/s x {seconds:.0f} s (the feeder fell behind)")


# The latency window opens this long (plus two triggers) after the query starts: JIT, first
# batches, Python workers. A smoke run (--no-warmup) opens it after the two triggers only.
LATENCY_WARMUP_S = 20.0


def latency_run(spark, k: BenchKafka, trigger_s: int, seconds: float, rate: int,
                workdir: str, warmup_s: float = LATENCY_WARMUP_S) -> dict[str, float]:
    """Produce ``rate`` rows/s stamped with their send time; measure when read_committed sees them.

    The samples are the records *sent* in a window of ``seconds`` after a warm-up, and the run
    waits until every one of them has arrived, so a late record is measured, never dropped."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    what = f"latency at a {trigger_s} s trigger"
    src, out = k.topic("lat-in", 2), k.topic("lat-out", 2)
    q = (spark.readStream.format("txkafka").options(**k.options)
         .option("subscribe", src).option("startingOffsets", "earliest")
         .options(**TXKAFKA_READ_OPTIONS).load()
         .selectExpr("key", "value").writeStream.format("txkafka")
         .options(**k.options).option("topic", out)
         .option("checkpointLocation", tempfile.mkdtemp(dir=workdir))
         .trigger(processingTime=f"{trigger_s} seconds").start())
    stop = threading.Event()
    win_start = time.time() + warmup_s + 2 * trigger_s
    win_end = win_start + seconds
    fed = {"in_window": 0, "last_stamp": 0.0}  # written by the feeder thread only

    def feed():
        p = Producer({**k.conf, "linger.ms": 1, "logger": QUIET})
        i = 0
        t0 = time.monotonic()
        while not stop.is_set():
            due = t0 + i / rate
            now = time.monotonic()
            if due > now:
                time.sleep(min(due - now, 0.01))
                continue
            stamp = time.time()
            p.produce(src, repr(stamp).encode(), b"%d" % i)
            p.poll(0)
            fed["in_window"] += win_start <= stamp < win_end
            fed["last_stamp"] = stamp
            i += 1
        p.flush(30)

    feeder = threading.Thread(target=feed, daemon=True)
    c = Consumer({**k.conf, "group.id": f"lat-{uuid.uuid4()}",
                  "isolation.level": "read_committed", "logger": QUIET})
    c.assign([TopicPartition(out, p, 0) for p in range(2)])
    samples: list[float] = []
    seen: set[bytes] = set()
    duplicates = 0
    drain_until = win_end + 2 * trigger_s + 30.0
    next_note = win_start
    feeder.start()
    try:
        while True:
            now = time.time()
            if now >= next_note:
                state = "warm-up" if now < win_start else "window" if now < win_end else "draining"
                say(f"  {what}: {state}, {len(samples):,} of {fed['in_window']:,} window "
                    "records received")
                next_note = max(now, win_start) + 10.0
                if q.exception() is not None or not q.isActive:
                    break  # no need to wait out the drain: reported below
            window_sent = fed["last_stamp"] >= win_end
            if (window_sent and len(samples) >= fed["in_window"]) or now > drain_until:
                break
            # One record per call: a batch call (consume(n, timeout)) returns only when it has n
            # records or its timeout passed, so the records of a batch's last partial chunk
            # would wait for the timeout and the figure would be the consumer's own wait.
            m = c.poll(0.2)
            if m is not None and not m.error():
                received = time.time()
                stamp = float(m.value())
                if win_start <= stamp < win_end:
                    if m.key() in seen:
                        duplicates += 1
                    else:
                        seen.add(m.key())
                        samples.append(received - stamp)
        # A query that died or stopped mid-window must not publish percentiles.
        if q.exception() is not None:
            raise RuntimeError(f"{what}: the query failed: {q.exception()}")
        if not q.isActive:
            raise RuntimeError(f"{what}: the query stopped before the window was received")
    finally:
        stop.set()
        feeder.join(30)
        c.close()
        _stop_between_batches(q)
    check_latency_samples(what, len(samples), fed["in_window"], duplicates, rate, seconds)
    samples.sort()

    def pct(p: float) -> float:
        return samples[min(len(samples) - 1, int(p * len(samples)))]

    return {"p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99), "samples": len(samples),
            "batch_ms": batch_phases(q.recentProgress, win_start, win_end)}


def batch_phases(progress: list[dict], start: float, end: float) -> dict[str, dict[str, float]]:
    """Where a latency window's batches spent their time: the median and max of each phase Spark
    reports (durationMs) over the data batches that started inside the window."""
    from datetime import datetime

    def started(p: dict) -> float:
        return datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()

    batches = [p for p in progress if p.get("numInputRows") and start <= started(p) < end]
    phases: dict[str, list[float]] = {}
    for p in batches:
        for key, ms in p.get("durationMs", {}).items():
            phases.setdefault(key, []).append(ms)
    return {key: {"median": statistics.median(v), "max": max(v)} for key, v in phases.items()}


# ----------------------------------------------------------------------------- orchestration

# The runs without Spark take 1-3 s and vary most on two cores shared with the broker (one
# compaction or GC shifts a run by 30 %); each round repeats them, so their medians rest on
# 3x as many runs as the Spark suites' for almost no extra time.
NO_SPARK_RUNS_PER_ROUND = 3


def _round_order(systems: list[tuple[str, str]], i: int) -> list[tuple[str, str]]:
    """Round ``i``: the rotated order, with the ceiling and core groups each run
    NO_SPARK_RUNS_PER_ROUND times in a row (still interleaved within their group)."""
    out: list[tuple[str, str]] = []
    order = _rotated(systems, i)
    for suite in dict.fromkeys(s for s, _ in order):
        group = [x for x in order if x[0] == suite]
        out += group * (NO_SPARK_RUNS_PER_ROUND if suite in ("ceiling", "core") else 1)
    return out


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def require_charts() -> None:
    """Stop before a run whose charts could not be drawn: matplotlib comes with the [bench] extra,
    and a run that finds it missing at the end has measured for nothing."""
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        raise CommandLineError(
            "the benchmark's charts need matplotlib, which txkafka's bench extra installs: "
            "pip install 'txkafka[bench]' (nothing was run)") from None


def read_result(path: str) -> dict[str, Any]:
    """A benchmark's result file (``--report``), or the command line's error naming it."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except OSError as e:
        raise CommandLineError(f"--report {path}: cannot read it ({e.strerror})") from None
    except ValueError as e:
        raise CommandLineError(f"--report {path}: not a benchmark's JSON result ({e})") from None


def run_bench(ns: argparse.Namespace) -> int:
    from ..embedded_kafka import EmbeddedKafka

    # Checked before anything starts: bad settings must not leave a broker running.
    require_charts()
    spark_conf = spark_conf_pairs(getattr(ns, "spark_conf", None) or [])
    given = KafkaConnection.optional_from_args(ns)
    variant = [LIBRDKAFKA] if getattr(ns, "librdkafka_producer", False) else []

    os.makedirs(ns.out, exist_ok=True)
    TXKAFKA_READ_OPTIONS.clear()
    if getattr(ns, "fetcher", "auto") != "auto":
        TXKAFKA_READ_OPTIONS["fetcher"] = ns.fetcher
    workdir = tempfile.mkdtemp(prefix="txkafka-bench-")
    cluster = None
    if given is not None:
        conn = given
        say(f"using the Kafka cluster at {conn.bootstrap}; the topics the benchmark creates are "
            "deleted at the end")
    else:
        say("starting the local Apache Kafka broker")
        # The sink suite counts each run's Produce requests in the broker's request log.
        cluster = EmbeddedKafka("bench", 1, progress=lambda m: say("  " + m),
                                request_log="sink" in ns.suites)
        conn = KafkaConnection.create(cluster.start(), {})
    # The broker processes whose CPU the sink and tasks suites count (none on another's cluster).
    broker_pids = [n.pid for n in cluster.node_infos if n.pid] if cluster is not None else []
    k = BenchKafka(conn)
    rows, repeats = ns.rows, ns.repeats
    if ns.pyspark_home:  # before the JVM starts: a JVM's SPARK_HOME is fixed for its life
        from ..pyspark_home import build

        os.environ["SPARK_HOME"] = str(build(progress=lambda m: say("  " + m)))
        say(f"Spark home with bytecode: {os.environ['SPARK_HOME']}")
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": command_line(sys.argv),
        "machine": machine(external_kafka=given is not None),
        "params": {"rows": rows, "repeats": repeats, "value_bytes": 100, "partitions": 4,
                   "sink_value_bytes": ns.sink_value_bytes, "sink_partitions": ns.sink_partitions,
                   "fetcher": TXKAFKA_READ_OPTIONS.get("fetcher", "auto"),
                   "librdkafka_producer": bool(variant), "spark_conf": redact_config(spark_conf),
                   "producers": dict(PRODUCERS),
                   # txkafka's Python worker settings (docs/user-guide.md), as the workers inherit
                   # them from this process in local mode
                   "worker_env": {k: v for k, v in sorted(os.environ.items())
                                  if k.startswith("TXKAFKA_WORKER_")},
                   "warmup": getattr(ns, "warmup", True)},
    }
    say(f"Python start-up: pyspark-bytecode {pyspark_bytecode_setting(result['machine'])} (Spark's "
        f"Python processes import pyspark from {result['machine']['spark_python_imports_pyspark_from']})")
    needs_spark = bool({"read", "write", "sink", "latency", "scaling", "tasks"} & set(ns.suites))
    spark = None
    event_dir = None
    try:
        if needs_spark:
            conf = {}
            if getattr(ns, "trace", False) and "tasks" in ns.suites:
                # The tasks suite's per-task breakdown is read from Spark's event log.
                event_dir = tempfile.mkdtemp(dir=workdir, prefix="events-")
                conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": event_dir,
                        "spark.eventLog.compress": "false",
                        "spark.eventLog.rolling.enabled": "false"}
            conf.update(spark_conf)
            spark = spark_session(builtin=not ns.skip_builtin, master=ns.master, conf=conf)
        if set(ns.suites) - {"tasks"}:
            say(f"filling the input topic: {rows} records of 100 B over 4 partitions")
            src = k.topic("bench-in", 4)
            k.fill(src, rows, 100)

        # One round = one run of every system of every throughput suite; rounds repeat, so each
        # ratio compares medians of runs interleaved in time and machine drift cancels.
        systems: list[tuple[str, str]] = []
        if "ceiling" in ns.suites:
            systems += [("ceiling", "produce"), ("ceiling", "consume")]
        if "core" in ns.suites:
            systems += [("core", "write"), ("core", "read")]
            core_batches = _arrow_batches(rows, 100)
        if "read" in ns.suites:
            systems += [("read", "txkafka")] + ([] if ns.skip_builtin else [("read", "kafka")])
            from .bench_tasks import FloorSource

            spark.dataSource.register(FloorSource)
        if "write" in ns.suites:
            systems += [("write", s) for s in ["txkafka_exactly_once", "txkafka_at_least_once",
                                                "noop"] + variant
                        + ([] if ns.skip_builtin else ["builtin"])]
        if "sink" in ns.suites:
            systems += [("sink", s) for s in ["txkafka_exactly_once", "txkafka_at_least_once"]
                        + variant + ["drain"]
                        + ([] if ns.skip_builtin else ["builtin"])]
            from .bench_tasks import DrainDataSource

            spark.dataSource.register(DrainDataSource)
            say(f"caching the sink suite's input: {rows} rows of {ns.sink_value_bytes:,} B in "
                f"Spark, written to topics of {ns.sink_partitions} partitions")
            sink_df = sink_frame(spark, rows, ns.sink_value_bytes)
            from .bench_tasks import CpuMeter

            sink_meter = CpuMeter.for_session(spark, broker_pids)
        per_batch = max(1000, rows // 8)
        runs: dict[tuple[str, str], list[float]] = {s: [] for s in systems}
        sink_cpu: dict[str, list[dict[str, float]]] = {}  # sink suite: CPU us per row by group
        sink_produce: dict[str, list[dict[str, int]]] = {}  # sink suite: the broker's count
        request_log = cluster.request_log_path(1) if cluster is not None and \
            cluster.request_log else None
        batch_runs: dict[str, list[float]] = {}  # read suite: rows/s inside the data batches
        start_runs: dict[str, list[float]] = {}  # read suite: s from start() to the first batch
        # Warm every system up once (JIT, Python workers, the built-in's consumer and producer
        # classes; for the runs without Spark the broker's page cache, log segments and the
        # transaction coordinator), so no system's first timed run pays for it. Full size: the
        # runs without Spark take seconds. --no-warmup: a smoke run whose figures are not compared.
        for suite, name in (systems if getattr(ns, "warmup", True) else []):
            if (suite, name) == ("ceiling", "produce"):
                say("warming up the plain producer")
                warm_topic = k.topic("bench-ceiling-warmup", 4)
                k.fill(warm_topic, rows, 100)
            elif (suite, name) == ("ceiling", "consume"):
                say("warming up the plain consumer")
                k.consume_all(warm_topic, rows)
            elif (suite, name) == ("core", "write"):
                say("warming up txkafka's writer without Spark")
                core_write_run(k, core_batches, rows, workdir)
            elif (suite, name) == ("core", "read"):
                say("warming up txkafka's reader without Spark")
                core_read_run(k, src, rows)
            elif suite == "read":
                say(f"warming up the {name} reader")
                read_run(spark, name, k.options, src, rows, workdir)
                if name == "txkafka":
                    floor_start_run(spark, workdir)
            elif suite == "write":
                say(f"warming up the {name} pipeline")
                write_run(spark, name, k, src, rows, workdir, 4, per_batch)
            elif suite == "sink":
                say(f"warming up the {name} sink")
                sink_run(k, name, sink_df, rows, ns.sink_partitions, ns.sink_value_bytes)
        for i in range(repeats if systems else 0):
            say(f"throughput round {i + 1}/{repeats}")
            for suite, name in _round_order(systems, i):
                if (suite, name) == ("ceiling", "produce"):
                    ceiling_topic = k.topic("bench-ceiling", 4)
                    value = k.fill(ceiling_topic, rows, 100)
                elif (suite, name) == ("ceiling", "consume"):
                    value = k.consume_all(ceiling_topic, rows)
                elif (suite, name) == ("core", "write"):
                    value = core_write_run(k, core_batches, rows, workdir)
                elif (suite, name) == ("core", "read"):
                    value = core_read_run(k, src, rows)
                elif suite == "read":
                    value, in_batches, first = read_run_detailed(spark, name, k.options, src, rows,
                                                                 workdir)
                    batch_runs.setdefault(name, []).append(in_batches)
                    start_runs.setdefault(name, []).append(first)
                    say(f"  read {name}: {in_batches:,.0f} rows/s inside the data batches, first "
                        f"batch {first:.2f} s after start()")
                    if name == "txkafka":
                        floor = floor_start_run(spark, workdir)
                        start_runs.setdefault(FLOOR, []).append(floor)
                        say(f"  read {FLOOR}: first batch {floor:.2f} s after start()")
                elif suite == "sink":
                    value = sink_run(k, name, sink_df, rows, ns.sink_partitions, ns.sink_value_bytes,
                                     sink_meter, sink_cpu.setdefault(name, []), request_log,
                                     sink_produce.setdefault(name, []))
                else:
                    value = write_run(spark, name, k, src, rows, workdir, 4, per_batch)
                runs[(suite, name)].append(value)
                say(f"  {suite} {name}: {value:,.0f} rows/s")
        if "ceiling" in ns.suites:
            prod, cons = runs[("ceiling", "produce")], runs[("ceiling", "consume")]
            result["ceiling"] = {"produce_rows_s": _median(prod), "consume_rows_s": _median(cons),
                                 "runs": {"produce": prod, "consume": cons}}
        for suite in ("core", "read", "write", "sink"):
            named = {name: v for (su, name), v in runs.items() if su == suite}
            if named:
                result[suite] = {n: {"rows_s": _median(v), "runs": v} for n, v in named.items()}
        for name, v in batch_runs.items():
            result["read"][name].update({"batch_rows_s": _median(v), "batch_runs": v})
        if start_runs:
            result["read_start"] = {
                "what": "seconds from start() to the query's first batch (its progress timestamp); "
                        f"{FLOOR}: a Python streaming source that imports nothing and reads one row",
                **{name: {"median_s": round(_median(v), 3), "runs": [round(x, 3) for x in v]}
                   for name, v in start_runs.items()}}
        if "write" in result:
            result["write"]["trigger"] = "1 second"
            result["write"]["rows_per_batch"] = per_batch
        if "sink" in result:
            result["sink"]["mode"] = "batch df.write of a cached DataFrame"
            for name, per_run in sink_cpu.items():
                if per_run:
                    result["sink"][name]["cpu_us_per_row"] = {
                        g: round(_median([c[g] for c in per_run]), 3) for g in per_run[0]}
            for name, counted in sink_produce.items():
                if counted:
                    result["sink"][name]["produce_requests"] = produce_summary(counted)
        if "sink" in ns.suites:
            sink_df.unpersist()

        if "latency" in ns.suites:
            result["latency"] = {}
            for trig in (1, 5):
                say(f"latency at a {trig} s trigger ({ns.latency_seconds:.0f} s after warm-up)")
                result["latency"][f"{trig}s"] = latency_run(
                    spark, k, trig, ns.latency_seconds, ns.latency_rate, workdir,
                    LATENCY_WARMUP_S if getattr(ns, "warmup", True) else 0.0)
                say(f"  {result['latency'][f'{trig}s']}")

        if "scaling" in ns.suites:
            result["scaling"] = []
            for parts in (1, 4, 16):
                for size in (100, 1000, 10000):
                    n = max(2000, rows * 100 // max(size, 100) // (1 if size == 100 else 2))
                    t = k.topic(f"bench-scale-{parts}p-{size}b", parts)
                    k.fill(t, n, size)
                    r = _median([read_run(spark, "txkafka", k.options, t, n, workdir)
                                 for _ in range(max(1, repeats // 2))])
                    # Four batches back to back (no trigger interval): a 1 s trigger would pace
                    # the larger values' few rows, and the figure would be the trigger's, not the sink's.
                    w = _median([write_run(spark, "txkafka_exactly_once", k, t, n, workdir, parts,
                                           max(1000, n // 4), trigger="0 seconds")
                                 for _ in range(max(1, repeats // 2))])
                    result["scaling"].append({"partitions": parts, "value_bytes": size, "rows": n,
                                              "read_rows_s": r, "write_rows_s": w,
                                              "read_mb_s": r * size / 1e6,
                                              "write_mb_s": w * size / 1e6})
                    say(f"  scaling {parts} partitions, {size} B: read {r:,.0f} rows/s, "
                        f"exactly-once write {w:,.0f} rows/s")

        if "tasks" in ns.suites:
            from .bench_tasks import run_tasks_suite

            result["tasks"] = run_tasks_suite(spark, k, ns, workdir, event_dir, say, broker_pids)
    finally:
        if spark is not None:
            spark.stop()
        if cluster is None:  # someone else's cluster: leave it as found
            k.delete_created()
        if cluster is not None and not ns.keep_broker:
            cluster.destroy()
        shutil.rmtree(workdir, ignore_errors=True)

    result["ratios"] = ratios(result)
    save_result(result, ns.out, "benchmark.json", charts, report_markdown)
    return 0


def save_result(result: dict[str, Any], out: str, name: str,
                draw: Callable[[dict[str, Any], str], Any],
                report: Callable[[dict[str, Any]], str]) -> None:
    """Stamp the finish time, write ``<out>/<name>`` and the charts, print the report."""
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path = os.path.join(out, name)
    with open(path, "w") as fh:
        json.dump(result, fh, indent=2)
    draw(result, out)
    say(f"wrote {path} and charts in {out}")
    print(report(result), flush=True)


def ratios(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}

    def add(name: str, value: float | None, target: float, compare: str = ">=") -> None:
        if value is None or value != value:
            return
        ok = value >= target if compare == ">=" else value <= target
        out[name] = {"value": round(value, 3), "target": f"{compare} {target}", "met": ok}

    read, write, ceiling = r.get("read", {}), r.get("write", {}), r.get("ceiling", {})
    if "kafka" in read:
        add("read txkafka / built-in", read["txkafka"]["rows_s"] / read["kafka"]["rows_s"], 2.0)
    if "kafka" in read and "batch_rows_s" in read["kafka"]:
        add("read txkafka / built-in, inside the data batches (query start and stop excluded)",
            read["txkafka"]["batch_rows_s"] / read["kafka"]["batch_rows_s"], 1.0)
    if "builtin" in write:
        for name, label in EOS_LABELS.items():
            if name in write:
                add(f"write txkafka {label} / built-in",
                    write[name]["rows_s"] / write["builtin"]["rows_s"], 1.2)
    if write:
        add("txkafka exactly_once / at_least_once (1 s trigger)",
            write["txkafka_exactly_once"]["rows_s"] / write["txkafka_at_least_once"]["rows_s"], 0.9)
    core = r.get("core", {})
    if ceiling and core:
        add("txkafka core read (no Spark) / plain consumer",
            core["read"]["rows_s"] / ceiling["consume_rows_s"], 0.7)
        add("txkafka core exactly-once write (no Spark) / plain producer",
            core["write"]["rows_s"] / ceiling["produce_rows_s"], 0.7)
    if ceiling and read:
        add("txkafka read in Spark / plain consumer",
            read["txkafka"]["rows_s"] / ceiling["consume_rows_s"], 0.7)
        if "batch_rows_s" in read["txkafka"]:
            add("txkafka read in Spark, inside the data batches / plain consumer",
                read["txkafka"]["batch_rows_s"] / ceiling["consume_rows_s"], 0.7)
    sink = r.get("sink", {})
    if ceiling and sink:
        add("txkafka exactly-once write in Spark (batch write, cached input) / plain producer",
            sink["txkafka_exactly_once"]["rows_s"] / ceiling["produce_rows_s"], 0.7)
    if "builtin" in sink:
        for name, label in EOS_LABELS.items():
            if name in sink:
                add(f"sink (batch write, cached input) {label} / built-in",
                    sink[name]["rows_s"] / sink["builtin"]["rows_s"], 1.2)
    for trig, lat in (r.get("latency") or {}).items():
        secs = float(trig.rstrip("s"))
        add(f"exactly-once visibility p99 at {trig} trigger (s)", lat["p99"], secs + 0.3, "<=")
    if r.get("tasks"):
        from .bench_tasks import tasks_ratios

        for name, value, target in tasks_ratios(r["tasks"]):
            add(name, value, target, "<=")
    return out


def machine(external_kafka: bool = False) -> dict[str, Any]:
    """What ran the benchmark. Kafka's protocol does not tell a broker's release, so on a
    cluster given with --bootstrap-servers the version is recorded as unknown, not guessed."""
    import pyspark

    from ..embedded_kafka import KAFKA_VERSION
    from ..installed_pyspark import spark_python_imports_from, state

    try:
        import confluent_kafka

        v = confluent_kafka.version()
        ck = f"{v if isinstance(v, str) else v[0]} (librdkafka {confluent_kafka.libversion()[0]})"
    except Exception:  # noqa: BLE001
        ck = "?"
    mem = ""
    try:
        with open("/proc/meminfo") as fh:
            mem = fh.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "memory": mem, "python": platform.python_version(),
            "platform": platform.platform(), "pyspark": pyspark.__version__, "confluent_kafka": ck,
            "kafka": ("external cluster (--bootstrap-servers), version unknown" if external_kafka
                      else KAFKA_VERSION),
            "spark_home": os.environ.get("SPARK_HOME") or "(the installed pyspark)",
            # `txkafka pyspark-bytecode` (enabled/disabled) and its effect: the installed package
            # (bytecode) or a pyspark.zip (compiled again in every new Python process)
            "pyspark_bytecode": state(),
            "spark_python_imports_pyspark_from": spark_python_imports_from()}


def charts(r: dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # One panel per suite the run has (a read-only run gets one chart, not two empty frames).
    # The core (no Spark) bars join the read and write panels, so a ceiling + core run has both.
    suites = [s for s in ("read", "write", "sink") if r.get(s) or (s != "sink" and r.get("core"))]
    axes: dict[str, Any] = {}
    if suites:
        fig, row = plt.subplots(1, len(suites), figsize=(5.4 * len(suites), 4.5), squeeze=False)
        axes = dict(zip(suites, row[0]))
    if "read" in axes:
        ax = axes["read"]
        names = list(r.get("read") or {})
        vals = [r["read"][n]["rows_s"] for n in names]
        inside = [r["read"][n].get("batch_rows_s") for n in names]
        if r.get("core"):
            names, vals = names + ["txkafka core\n(no Spark)"], vals + [r["core"]["read"]["rows_s"]]
            inside.append(None)
        xs = list(range(len(names)))
        got = [(x, v) for x, v in zip(xs, inside) if v]
        shift = 0.2 if got else 0.0  # side by side only when there are in-batch bars
        ax.bar([x - shift for x in xs], vals, width=0.4, color="#2a7", label="whole query")
        if got:
            ax.bar([x + 0.2 for x, _ in got], [v for _, v in got], width=0.4, color="#8cd",
                   label="inside the data batches")
        ax.set_xticks(xs, names)
        ax.set_title("read (AvailableNow, noop sink)" if r.get("read") else "read without Spark")
        ax.set_ylabel("rows/s")
    if "write" in axes:
        ax = axes["write"]
        names = [n for n in (r.get("write") or {}) if isinstance(r["write"][n], dict)]
        vals = [r["write"][n]["rows_s"] for n in names]
        if r.get("core"):
            names, vals = names + ["core EOS\n(no Spark)"], vals + [r["core"]["write"]["rows_s"]]
        ax.bar(names, vals)
        ax.set_title("Kafka -> Spark -> Kafka, 1 s trigger" if r.get("write")
                     else "exactly-once write without Spark")
        ax.tick_params(axis="x", rotation=20)
    if "sink" in axes:
        ax = axes["sink"]
        names = [n for n in r["sink"] if isinstance(r["sink"][n], dict)]
        ax.bar(names, [r["sink"][n]["rows_s"] for n in names], color="#58a")
        ax.set_title("sink: batch df.write of a cached DataFrame")
        ax.set_ylabel("rows/s")
        ax.tick_params(axis="x", rotation=20)
    for suite in suites:
        if r.get("ceiling"):
            key = "consume_rows_s" if suite == "read" else "produce_rows_s"
            axes[suite].axhline(r["ceiling"][key], color="red", ls="--", label="plain client ceiling")
            axes[suite].legend(fontsize=8, loc="lower right")
    if suites:
        fig.tight_layout()
        fig.savefig(os.path.join(out, "throughput.png"), dpi=110)
        plt.close(fig)

    if r.get("latency"):
        fig, ax = plt.subplots(figsize=(6, 4))
        trigs = list(r["latency"])
        for i, p in enumerate(("p50", "p95", "p99")):
            ax.bar([j + i * 0.25 for j in range(len(trigs))], [r["latency"][t][p] for t in trigs],
                   width=0.25, label=p)
        ax.set_xticks([j + 0.25 for j in range(len(trigs))], [f"trigger {t}" for t in trigs])
        ax.set_ylabel("seconds until visible to read_committed")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "latency.png"), dpi=110)
        plt.close(fig)

    if r.get("scaling"):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for size in sorted({s["value_bytes"] for s in r["scaling"]}):
            pts = [s for s in r["scaling"] if s["value_bytes"] == size]
            xs = [s["partitions"] for s in pts]
            axes[0].plot(xs, [s["read_mb_s"] for s in pts], marker="o", label=f"{size} B")
            axes[1].plot(xs, [s["write_mb_s"] for s in pts], marker="o", label=f"{size} B")
        for ax, title in ((axes[0], "txkafka read"), (axes[1], "txkafka exactly-once write")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("partitions")
            ax.set_ylabel("MB/s")
            ax.set_title(title)
            ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "scaling.png"), dpi=110)
        plt.close(fig)

    if r.get("tasks"):
        from .bench_tasks import chart

        chart(r["tasks"], out)


def pyspark_bytecode_setting(m: dict[str, Any]) -> str:
    """How the run's Spark-started Python processes imported pyspark. Results written before the
    ``pyspark_bytecode`` field are read from where those processes imported it."""
    if m.get("pyspark_bytecode"):
        return m["pyspark_bytecode"]
    if m.get("spark_home", "(the installed pyspark)") != "(the installed pyspark)":
        return "a Spark home built by `txkafka pyspark-home`"
    imported = m.get("spark_python_imports_pyspark_from", "?")
    if imported == "?":
        return "unknown"
    return "disabled" if "pyspark.zip" in imported else "enabled"


def produce_summary(counted: list[dict[str, int]]) -> dict[str, Any]:
    """Runs' Produce counts (:func:`produce_requests`) as medians, with bytes per request."""
    return {"requests": _median([c["requests"] for c in counted]),
            "empty": _median([c["empty"] for c in counted]),
            "bytes_per_request": round(_median([c["bytes"] / max(1, c["requests"])
                                                for c in counted])),
            "runs": counted}


def report_markdown(r: dict[str, Any]) -> str:
    lines = ["| comparison | value | target | met |", "|---|---|---|---|"]
    if r.get("machine"):
        lines = [f"Python start-up: `txkafka pyspark-bytecode` {pyspark_bytecode_setting(r['machine'])} "
                 f"(Spark's Python processes imported pyspark from "
                 f"`{r['machine'].get('spark_python_imports_pyspark_from', '?')}`)", ""] + lines
    for name, v in r.get("ratios", {}).items():
        lines.append(f"| {name} | {v['value']} | {v['target']} | {'yes' if v['met'] else 'no'} |")
    ran = {n for suite in ("write", "sink") for n in (r.get(suite) or {})}
    ran |= set((r.get("tasks") or {}).get("systems", []))
    named = {n: p for n, p in producers_of(r).items() if n in ran}
    if named:
        at = lines.index("| comparison | value | target | met |")
        lines[at:at] = [f"Producers: {', '.join(f'{n} {p}' for n, p in named.items())}", ""]
    if r.get("read") or r.get("write") or r.get("core") or r.get("sink"):
        lines += ["", "| run | rows/s (median) | runs |", "|---|---|---|"]
        for suite in ("core", "read", "write", "sink"):
            for name, v in (r.get(suite) or {}).items():
                if isinstance(v, dict):
                    lines.append(f"| {suite}: {name} | {v['rows_s']:,.0f} | "
                                 f"{', '.join(f'{x:,.0f}' for x in v['runs'])} |")
                    if "batch_rows_s" in v:
                        lines.append(f"| {suite}: {name}, inside the data batches | "
                                     f"{v['batch_rows_s']:,.0f} | "
                                     f"{', '.join(f'{x:,.0f}' for x in v['batch_runs'])} |")
        if r.get("ceiling"):
            c = r["ceiling"]
            lines.append(f"| ceiling: plain producer | {c['produce_rows_s']:,.0f} | "
                         f"{', '.join(f'{x:,.0f}' for x in c['runs']['produce'])} |")
            lines.append(f"| ceiling: plain consumer | {c['consume_rows_s']:,.0f} | "
                         f"{', '.join(f'{x:,.0f}' for x in c['runs']['consume'])} |")
    if r.get("read_start"):
        lines += ["", "| query start: start() to the first batch | s (median) | runs |",
                  "|---|---|---|"]
        for n, v in r["read_start"].items():
            if isinstance(v, dict):
                lines.append(f"| {n} | {v['median_s']:.2f} | "
                             f"{', '.join(f'{x:.2f}' for x in v['runs'])} |")
    cpu = {n: v["cpu_us_per_row"] for n, v in (r.get("sink") or {}).items()
           if isinstance(v, dict) and "cpu_us_per_row" in v}
    if cpu:
        groups = [g for g in next(iter(cpu.values())) if any(c.get(g) for c in cpu.values())]
        lines += ["", "| sink: CPU us per row (median of runs) | " + " | ".join(groups) + " |",
                  "|---|" + "---|" * len(groups)]
        for n, c in cpu.items():
            lines.append(f"| {n} | " + " | ".join(f"{c.get(g, 0.0):.2f}" for g in groups) + " |")
    produced = {n: v["produce_requests"] for n, v in (r.get("sink") or {}).items()
                if isinstance(v, dict) and "produce_requests" in v}
    if produced:
        lines += ["", "| sink: Produce requests per run (the broker's count, median) | requests | "
                  "empty | bytes per request |", "|---|---|---|---|"]
        for n, c in produced.items():
            lines.append(f"| {n} | {c['requests']:,.0f} | {c['empty']:,.0f} | "
                         f"{c['bytes_per_request']:,.0f} |")
    if r.get("latency"):
        lines += ["", "| trigger | p50 s | p95 s | p99 s | samples |", "|---|---|---|---|---|"]
        for t, v in r["latency"].items():
            lines.append(f"| {t} | {v['p50']:.2f} | {v['p95']:.2f} | {v['p99']:.2f} | {v['samples']} |")
        for t, v in r["latency"].items():
            if v.get("batch_ms"):
                lines.append(f"\n{t} trigger, the window's batches (ms, median / max): " + ", ".join(
                    f"{k} {x['median']:g} / {x['max']:g}" for k, x in v["batch_ms"].items()))
    if r.get("scaling"):
        lines += ["", "| partitions | value | rows | read rows/s | read MB/s | EOS write rows/s | "
                  "EOS write MB/s |", "|---|---|---|---|---|---|---|"]
        for s in r["scaling"]:
            lines.append(f"| {s['partitions']} | {s['value_bytes']} B | {s['rows']} | "
                         f"{s['read_rows_s']:,.0f} | {s['read_mb_s']:.1f} | {s['write_rows_s']:,.0f} | "
                         f"{s['write_mb_s']:.1f} |")
    if r.get("tasks"):
        from .bench_tasks import report_lines

        lines += report_lines(r["tasks"])
    return "\n".join(lines)


def cmd_report(ns: argparse.Namespace) -> int:
    print(report_markdown(read_result(ns.report)))
    return 0


def register_cli(sub) -> None:
    suites = ["ceiling", "core", "read", "write", "sink", "latency", "scaling", "tasks"]
    p = sub.add_parser("bench", help="benchmarks: txkafka vs Spark's Kafka connector and the client")
    add_kafka_options(p, required=False, cluster="run on this Kafka cluster: its version is "
                      "recorded as unknown, and the topics the benchmark creates are deleted at "
                      "the end")
    p.add_argument("--out", default="results", metavar="DIR",
                   help="folder for benchmark.json and the PNG charts")
    p.add_argument("--rows", type=int, default=1_000_000, metavar="N",
                   help="records per throughput run")
    p.add_argument("--repeats", type=int, default=3, metavar="N",
                   help="interleaved runs per system; the median is reported")
    p.add_argument("--suites", nargs="+", default=suites, choices=suites, metavar="SUITE",
                   help=f"the suites to run (default: all of {' '.join(suites)})")
    p.add_argument("--tasks-partitions", nargs="+", type=int, default=[2, 16, 64, 200, 400],
                   metavar="P", help="tasks suite: the write tasks per batch to measure, each a "
                   "repartition(P)")
    p.add_argument("--tasks-batches", type=int, default=3, metavar="N",
                   help="tasks suite: batches per run")
    p.add_argument("--tasks-systems", nargs="+", metavar="SYSTEM",
                   help="tasks suite: only these systems (default: all; builtin drain "
                        "mapinarrow_noop txkafka_at_least_once txkafka_exactly_once "
                        "txkafka_exactly_once_librdkafka)")
    p.add_argument("--tasks-batch-rows", type=int, default=40_000, metavar="N",
                   help="tasks suite: rows per batch, its maxOffsetsPerTrigger")
    p.add_argument("--trace", action="store_true",
                   help="tasks suite: break each write stage down per task from Spark's event log")
    p.add_argument("--sink-value-bytes", type=int, default=100, metavar="N",
                   help="sink suite: bytes per record value; the size runs take 1048576")
    p.add_argument("--sink-partitions", type=int, default=4, metavar="N",
                   help="sink suite: partitions of each output topic; the size runs take 500")
    p.add_argument("--latency-seconds", type=float, default=40.0, metavar="SECONDS",
                   help="latency suite: the measured window after the warm-up")
    p.add_argument("--latency-rate", type=int, default=2000, metavar="N",
                   help="latency suite: records per second fed")
    p.add_argument("--master", default="local[2]", help="the Spark master")
    p.add_argument("--spark-conf", action="append", metavar="KEY=VALUE",
                   help="a Spark setting of the benchmark's session (repeatable)")
    p.add_argument("--skip-builtin", action="store_true", help="no Spark built-in connector runs")
    p.add_argument("--fetcher", choices=["auto", "wire", "librdkafka"], default="auto",
                   help="the txkafka readers' fetcher option, how executors read")
    p.add_argument("--librdkafka-producer", action="store_true",
                   help="write, sink and tasks suites: also run exactly_once with "
                        "producer=librdkafka (the txkafka systems write with the default producer)")
    p.add_argument("--pyspark-home", action="store_true",
                   help="run Spark from the Spark home txkafka pyspark-home builds (pyspark.zip "
                        "with bytecode) instead of the installed one")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="no untimed warm-up run per system, and the latency window opens after "
                        "two triggers instead of 20 s more (a smoke run: its figures include "
                        "each system's first-run costs and are not for comparison)")
    p.add_argument("--keep-broker", action="store_true",
                   help="leave the local broker running after the run")
    p.add_argument("--report", metavar="FILE",
                   help="print the markdown tables of an existing benchmark.json, run nothing")
    p.set_defaults(func=lambda ns: cmd_report(ns) if ns.report else run_bench(ns))
