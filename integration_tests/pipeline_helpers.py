"""Run and check Kafka -> txkafka -> Kafka pipelines in tests."""

from __future__ import annotations

import time
from dataclasses import dataclass

from integration_tests.kafka_helpers import KafkaTarget
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.sink.transactional_ids import TransactionalIdFactory
from txkafka.verify import VerifyReport, verify


@dataclass
class PipelineTopics:
    source: str
    sink: str
    expected_ids: int


def make_input(kafka: KafkaTarget, records: int = 3000, partitions: int = 3,
               out_partitions: int = 3, per_txn: int = 500) -> PipelineTopics:
    """An input topic of unique keys written in transactions, one in four aborted."""
    src = kafka.create_topic(partitions=partitions)
    dst = kafka.create_topic(partitions=out_partitions)
    seq = 0
    committed = 0
    n = 0
    while committed < records:
        n += 1
        abort = n % 4 == 0
        batch = [(f"{'aborted' if abort else 'id'}-{seq + i:07d}", f"value-{seq + i}")
                 for i in range(per_txn)]
        kafka.produce(src, batch, transactional=True, commit=not abort)
        seq += per_txn
        committed += 0 if abort else per_txn
    return PipelineTopics(src, dst, committed)


def pipeline_args(kafka: KafkaTarget, topics: PipelineTopics, checkpoint: str, *extra: str) -> list[str]:
    return ["-m", "txkafka.pipeline", "-b", kafka.bootstrap, "--input", topics.source,
            "--output", topics.sink, "--checkpoint", checkpoint, "--until-done",
            "--trigger-ms", "300", *extra]


def run_pipeline(driver_processes, args: list[str], timeout: float = 300.0):
    """Start the pipeline driver in its own session; wait for it to exit (or be killed)."""
    proc = driver_processes(args[0], *args[1:])
    try:
        code = proc.wait(timeout)
    except Exception:
        proc.kill()
        raise AssertionError(f"pipeline did not finish in {timeout}s:\n{proc.tail()}") from None
    return code, proc


def sink_prefix(checkpoint: str) -> str:
    """The transactional-id prefix of the sink whose commit log lives under ``checkpoint`` (never
    creates one: a wrong path would otherwise check a new, empty prefix and pass)."""
    ident = SinkCommitLog(checkpoint).existing_identity()
    assert ident is not None, f"no sink commit log (sink.json) under {checkpoint}"
    return TransactionalIdFactory(ident.prefix, ident.sink_id).sink_prefix


def assert_exactly_once(kafka: KafkaTarget, topics: PipelineTopics, checkpoint: str | None = None,
                        prefix: str = "txkafka-") -> VerifyReport:
    """No duplicate, no gap, and nothing left open by this sink (by every txkafka sink without a
    checkpoint: tests that share the broker must not see each other's transactions then)."""
    rep = verify({"bootstrap.servers": kafka.bootstrap}, topics.source, topics.sink)
    assert rep.expected == topics.expected_ids, rep.text()
    assert rep.ok, rep.text()
    open_txns = kafka.open_transactions(sink_prefix(checkpoint) if checkpoint else prefix)
    assert open_txns == [], f"transactions left open: {open_txns}"
    return rep


def wait_until(predicate, timeout: float, what: str, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")

