"""Switching a query between Spark's built-in ``format("kafka")`` and txkafka on the same checkpoint
(docs/switching.md), with real Spark and Kafka, each output checked by read_committed reads for
duplicates and gaps.

One driver process runs every leg's first part at once (its own input, output and checkpoint per
leg), one more runs their second part with the other formats:

- ``to-*`` / ``back-*``: a clean stop (the query idle) on one format, new input, a restart on the
  other. Exact, except going back to the built-in source after txkafka's first batch only (its
  offsets/0 carries the batch's start, which Spark's source cannot parse): a loud failure.
- ``crash-to-*``: the built-in query SIGKILLed while input keeps coming, then the restart on
  txkafka's source, sink or both. No gaps; duplicates only among the records of the batch the
  built-in sink was writing when it died (it is at-least-once: the re-run writes them again); every
  record after that batch once.
- ``crash-back``: txkafka's sink killed with a batch decided but not committed, the query then run
  on the built-in sink (which writes that batch again), then back on txkafka: the sink refuses to
  commit the decided transactions (SupersededDecisionError) until the operator aborts them with
  ``txkafka transactions abort --force``; then every record once.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from integration_tests.kafka_helpers import KafkaTarget
from integration_tests.pipeline_helpers import PipelineTopics, make_input, sink_prefix, wait_until
from integration_tests.spark_driver import DriverProcess
from txkafka.connector.checkpoint.spark_checkpoint import SparkCheckpoint
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.pipeline import _caught_up
from txkafka.spark_kafka_packages import builtin_kafka_conf

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

DRIVER = Path(__file__).with_name("switch_driver.py")
# leg: (first source, first sink, second source, second sink, maxOffsetsPerTrigger)
CLEAN = {
    "to-source": ("kafka", "kafka", "txkafka", "kafka", 0),
    "to-sink": ("kafka", "kafka", "kafka", "txkafka", 0),
    "to-both": ("kafka", "kafka", "txkafka", "txkafka", 0),
    "back-source": ("txkafka", "txkafka", "kafka", "txkafka", 700),
    "back-sink": ("txkafka", "txkafka", "txkafka", "kafka", 700),
    "back-after-batch-0": ("txkafka", "txkafka", "kafka", "txkafka", 0),
}
CRASH = {
    "crash-to-source": ("kafka", "kafka", "txkafka", "kafka", 150),
    "crash-to-sink": ("kafka", "kafka", "kafka", "txkafka", 150),
    "crash-to-both": ("kafka", "kafka", "txkafka", "txkafka", 150),
}
# txkafka's sink stops after deciding this batch of crash-back (the others never reach it).
CRASH_BACK_BATCH = 7
RECORDS = 1500


def more_input(kafka: KafkaTarget, topics: PipelineTopics, tag: str, n: int) -> None:
    """``n`` more committed records with new unique keys (an aborted transaction before them)."""
    kafka.produce(topics.source, [(f"aborted-{tag}-{i}", "x") for i in range(50)],
                  transactional=True, commit=False)
    kafka.produce(topics.source, [(f"{tag}-{i:07d}", f"value-{tag}-{i}") for i in range(n)],
                  transactional=True)
    topics.expected_ids += n


class _Feeder(threading.Thread):
    """Keeps input coming to the crash legs until stopped, so the kill finds batches in flight."""

    def __init__(self, kafka: KafkaTarget, legs: dict[str, PipelineTopics]) -> None:
        super().__init__(daemon=True)
        self.kafka, self.legs, self.stop = kafka, legs, threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        n = 0
        deadline = time.monotonic() + 900  # bounded: the test kills the driver long before
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                for topics in self.legs.values():
                    more_input(self.kafka, topics, f"feed{n}", 40)
            except Exception as e:  # noqa: BLE001 - reported by the test
                self.errors.append(repr(e))
                return
            n += 1
            self.stop.wait(0.2)


def _spec(tmp: Path, kafka: KafkaTarget, legs: dict, which: int, part: dict[str, tuple],
          timeout_s: float, until_killed: set[str] = frozenset(),
          sink_kafka: dict[str, dict] | None = None) -> Path:
    """The driver's spec: every leg's ``which`` part (0: first formats, 1: second)."""
    out = []
    sink_kafka = sink_kafka or {}
    for name, (topics, ck) in legs.items():
        formats = part[name]
        out.append({"name": name, "bootstrap": kafka.bootstrap, "input": topics.source,
                    "output": topics.sink, "checkpoint": ck,
                    "source": formats[2 * which], "sink": formats[2 * which + 1],
                    "max_offsets": formats[4], "until_killed": name in until_killed,
                    "sink_kafka": sink_kafka.get(name) if which == 0 else None})
    path = tmp / f"spec-{which}.json"
    path.write_text(json.dumps({"trigger_ms": 300, "timeout_s": timeout_s, "legs": out}))
    return path


def _lines(proc: DriverProcess) -> list[list[str]]:
    """The driver's LEG lines, split in 4: LEG, name, status, rest."""
    return [line.split(" ", 3) for line in proc.output().replace("\r", "\n").splitlines()
            if line.startswith("LEG ") and line.count(" ") >= 2]


def _leg_lines(proc: DriverProcess, status: str) -> set[str]:
    return {parts[1] for parts in _lines(proc) if parts[2] == status}


def _failure(proc: DriverProcess, leg: str) -> str | None:
    for parts in _lines(proc):
        if parts[1:3] == [leg, "FAILED"]:
            return json.loads(parts[3])
    return None


def _in_flight(ck: str) -> bool:
    """Spark logged the newest batch's offsets and has not committed it: the kill lands in it."""
    spark_ck = SparkCheckpoint(ck)
    n = spark_ck.latest_offsets_batch()
    return n is not None and not spark_ck.has_commit(n)


def _crashed_batch_keys(kafka: KafkaTarget, topics: PipelineTopics, ck: str) -> tuple[int, set]:
    """The batch the killed built-in query was running (offsets/N without commits/N) and the keys
    of its input records; (-1, {}) when it died between batches."""
    spark_ck = SparkCheckpoint(ck)
    n = spark_ck.latest_offsets_batch()
    assert n is not None and n >= 1, f"{ck}: the built-in query did not get past batch 0"
    if spark_ck.has_commit(n):
        return -1, set()
    start = spark_ck.read_offsets(n - 1).topic_offsets(topics.source)
    end = spark_ck.read_offsets(n).topic_offsets(topics.source)
    keys = {r.key for r in kafka.read_all(topics.source)
            if start.get(r.partition, 0) <= r.offset < end.get(r.partition, 0)}
    return n, keys


def _check(kafka: KafkaTarget, topics: PipelineTopics, may_repeat: set = frozenset()) -> Counter:
    """No gap; a key twice only if ``may_repeat`` has it, never more than twice; nothing else."""
    expected = {r.key for r in kafka.read_all(topics.source)}
    assert len(expected) == topics.expected_ids
    got = Counter(r.key for r in kafka.read_all(topics.sink))
    missing = expected - set(got)
    assert not missing, f"{len(missing)} records missing, e.g. {sorted(missing)[:3]}"
    assert set(got) == expected, f"unexpected records: {sorted(set(got) - expected)[:3]}"
    repeated = {k: n for k, n in got.items() if n > 1}
    assert set(repeated) <= may_repeat and max(repeated.values(), default=1) <= 2, (
        f"{len(repeated)} keys repeated, {len(set(repeated) - set(may_repeat))} outside the "
        f"crashed batch, e.g. {sorted(repeated.items())[:3]}")
    return got


@pytest.fixture(scope="module")
def switched(kafka, spark, tmp_path_factory):
    """Runs every leg: part one (crash legs killed), part two, and crash-back's return."""
    builtin_kafka_conf()  # resolved here, so that a Maven failure shows in the test
    tmp = tmp_path_factory.mktemp("switching")
    formats = {**CLEAN, **CRASH,
               "crash-back": ("txkafka", "txkafka", "txkafka", "kafka", 150)}
    legs = {name: (make_input(kafka, records=RECORDS, per_txn=250), str(tmp / f"ck-{name}"))
            for name in formats}
    procs: list[DriverProcess] = []
    try:
        yield _run(kafka, spark, tmp, legs, formats, procs)
    finally:
        for p in procs:
            p.kill()


def _run(kafka, spark, tmp, legs, formats, procs) -> dict:
    first = DriverProcess(DRIVER, [str(_spec(tmp, kafka, legs, 0, formats, 900,
                                             until_killed=set(CRASH) | {"crash-back"},
                                             # open until the operator aborts them, not aborted
                                             # by the broker meanwhile
                                             sink_kafka={"crash-back": {
                                                 "transaction.timeout.ms": "600000"}}))],
                          env={"TXKAFKA_FAULT_INJECTION": f"point=after_decision,batch="
                                                          f"{CRASH_BACK_BATCH},action=sleep,"
                                                          "ms=600000"})
    procs.append(first.start())
    feeder = _Feeder(kafka, {n: legs[n][0] for n in CRASH})
    decision = (Path(SinkCommitLog(legs["crash-back"][1]).log_dir)
                / f"{CRASH_BACK_BATCH:020d}-000.decision.json")

    def ready() -> bool:
        assert first.alive(), f"the first driver ended:\n{first.tail()}"
        assert not _leg_lines(first, "FAILED"), first.tail()
        if feeder.ident is None and set(CRASH) <= _leg_lines(first, "STARTED"):
            feeder.start()
        return (_leg_lines(first, "DONE") == set(CLEAN) and decision.exists()
                and all(SparkCheckpoint(legs[n][1]).has_commit(1) for n in CRASH)
                and any(_in_flight(legs[n][1]) for n in CRASH))

    try:
        wait_until(ready, 900, "the clean legs' first part, batch 1 of each crash leg, a crash "
                               "leg in a batch and crash-back's decision of batch "
                               f"{CRASH_BACK_BATCH}", interval=0.05)
    finally:
        feeder.stop.set()
        if feeder.is_alive():
            feeder.join(60)
    first.kill()  # SIGKILL: the crash legs die mid-run, crash-back with its batch decided
    assert not feeder.errors, feeder.errors
    crashed = {n: _crashed_batch_keys(kafka, legs[n][0], legs[n][1]) for n in CRASH}
    for name in CLEAN:
        more_input(kafka, legs[name][0], "second", 500)

    second = DriverProcess(DRIVER, [str(_spec(tmp, kafka, legs, 1, formats, 900))])
    procs.append(second.start())
    code = second.wait(1000)
    assert code == 0, f"second driver exit {code}:\n{second.tail(80)}"
    return {"legs": legs, "crashed": crashed, "second": second,
            "crash_back": _crash_back_return(kafka, spark, legs["crash-back"])}


def _crash_back_return(kafka, spark, leg) -> dict:
    """crash-back on txkafka again, in the tests' SparkSession: refused while the decided
    transactions are open; after `txkafka transactions abort --force`, it completes."""
    from txkafka.cli import main as cli

    topics, ck = leg
    more_input(kafka, topics, "third", 300)

    def start():
        return (spark.readStream.format("txkafka")
                .option("kafka.bootstrap.servers", kafka.bootstrap)
                .option("subscribe", topics.source).load()
                .selectExpr("key", "concat(CAST(value AS STRING), '|seen') AS value")
                .writeStream.format("txkafka").option("checkpointLocation", ck)
                .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", topics.sink)
                .trigger(processingTime="300 milliseconds").start())

    for _ in range(5):
        q = start()
        try:
            q.awaitTermination(180)  # raises the query's error
            refused = None
        except Exception as e:  # noqa: BLE001 - the refusal is the point: checked by the test
            refused = str(e)
        finally:
            q.stop()
        if refused is None or "Python worker failed to connect back" not in refused:
            break
    open_before = [t.transactional_id for t in kafka.open_transactions(sink_prefix(ck))]
    aborted = cli(["transactions", "abort", "-b", kafka.bootstrap, "--checkpoint", ck,
                   "--force", "--yes"])
    target = kafka.end_offsets(topics.source)
    for _ in range(5):
        q = start()
        try:
            wait_until(lambda: q.exception() is not None or _caught_up(q, topics.source, target),
                       180, "crash-back to finish on txkafka after the abort")
            error = q.exception()
        finally:
            q.stop()
        if error is None or "Python worker failed to connect back" not in str(error):
            break
    return {"refused": refused, "open_before": open_before, "abort_code": aborted,
            "error_after": str(error) if error is not None else None}


@pytest.mark.parametrize("leg", sorted(set(CLEAN) - {"back-after-batch-0"}))
def test_switch_after_a_clean_stop_is_exact(switched, kafka, leg):
    topics, ck = switched["legs"][leg]
    assert leg in _leg_lines(switched["second"], "DONE"), switched["second"].tail()
    _check(kafka, topics)
    if "txkafka" in (CLEAN[leg][1], CLEAN[leg][3]):  # a txkafka sink: nothing left open
        assert kafka.open_transactions(sink_prefix(ck)) == []


def test_builtin_source_refuses_txkafkas_first_batch_offsets_loudly(switched, kafka):
    """txkafka's batch 0 end carries its start ("txkafka:start"): Spark's source fails to parse
    it and stops at once (nothing read, nothing written); docs/switching.md says what to do."""
    topics, _ = switched["legs"]["back-after-batch-0"]
    error = _failure(switched["second"], "back-after-batch-0")
    assert error is not None and "txkafka:start" in error, switched["second"].tail()
    assert len(kafka.read_all(topics.sink)) == topics.expected_ids - 500  # the first part's only


@pytest.mark.parametrize("leg", sorted(CRASH))
def test_switch_to_txkafka_after_a_builtin_crash(switched, kafka, leg):
    """No gap. The built-in sink is at-least-once: the batch it died in may be partly written, and
    its re-run (by txkafka's sink, or the built-in's again for a source-only switch) writes it
    again; every other record is in the output once."""
    topics, ck = switched["legs"][leg]
    assert leg in _leg_lines(switched["second"], "DONE"), switched["second"].tail()
    batch, keys = switched["crashed"][leg]
    got = _check(kafka, topics, may_repeat=keys)
    repeated = sum(1 for n in got.values() if n > 1)
    print(f"{leg}: killed in batch {batch} ({len(keys)} records); {repeated} written twice")
    if CRASH[leg][3] == "txkafka":
        assert kafka.open_transactions(sink_prefix(ck)) == []


def test_back_to_builtin_sink_after_a_txkafka_crash_then_to_txkafka_again(switched, kafka):
    """The built-in sink wrote crash-back's decided batch again; back on txkafka, committing the
    decided transactions would duplicate it: refused, then exact once the operator aborted them."""
    topics, ck = switched["legs"]["crash-back"]
    result = switched["crash_back"]
    refused = result["refused"] or ""
    assert "SupersededDecisionError" in refused, refused
    assert f"batch {CRASH_BACK_BATCH}: txkafka's sink decided" in refused, refused
    assert "txkafka transactions abort" in refused, refused
    assert result["open_before"], "the decided transactions should have been open"
    assert result["abort_code"] == 0 and result["error_after"] is None, result
    _check(kafka, topics)
    assert kafka.open_transactions(sink_prefix(ck)) == []
