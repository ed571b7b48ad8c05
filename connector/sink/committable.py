"""What a task hands to the driver after pre-commit: enough to validate and end its transaction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .partition_input import PartitionInput


@dataclass(frozen=True)
class KafkaCommittable:
    """One pre-committed (flushed, verified, still open) transaction of one task attempt."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partition_id: int
    attempt: int
    batch_id: int
    record_count: int
    # topic -> partitions written in this transaction (from librdkafka's statistics)
    topic_partitions: dict[str, list[int]] = field(default_factory=dict)
    # The coordinator's start time of this transaction (DescribeTransactions, read by the driver
    # before it decides; -1 in records written before it was kept): an abort of the same id and
    # producer at the next epoch is this transaction's only if the start time is the same.
    start_time_ms: int = -1
    # Key and value bytes of the records written (the sink's figures); -1: not counted (a
    # record written before txkafka counted them).
    byte_count: int = -1

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for unknown in ("start_time_ms", "byte_count"):
            if d[unknown] < 0:
                del d[unknown]  # left out, as records written before it read back
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "KafkaCommittable":
        tp = {str(t): sorted(int(p) for p in ps) for t, ps in (d.get("topic_partitions") or {}).items()}
        return cls(
            transactional_id=str(d["transactional_id"]),
            producer_id=int(d["producer_id"]),
            producer_epoch=int(d["producer_epoch"]),
            partition_id=int(d["partition_id"]),
            attempt=int(d["attempt"]),
            batch_id=int(d["batch_id"]),
            record_count=int(d["record_count"]),
            topic_partitions=tp,
            start_time_ms=int(d.get("start_time_ms", -1)),
            byte_count=int(d.get("byte_count", -1)),
        )

    @property
    def key(self) -> tuple[str, int, int]:
        """The (id, producer id, epoch) triple that EndTxn needs."""
        return self.transactional_id, self.producer_id, self.producer_epoch

    def describe_partitions(self) -> str:
        return ", ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in sorted(self.topic_partitions.items()))


@dataclass(frozen=True)
class TaskResult:
    """A task's answer: a committable, or nothing (empty task, skipped batch) with a count, and
    what the task read (a skipping task reads its input too), for the layout check."""

    partition_id: int
    attempt: int
    batch_id: int
    committable: KafkaCommittable | None = None
    record_count: int = 0
    skipped: bool = False
    input: PartitionInput | None = None

    def read(self) -> PartitionInput:
        """What the task read; from the record count when the task did not digest its input."""
        if self.input is not None:
            return self.input
        return PartitionInput(None if self.skipped else self.record_count)
