"""How far a reader is behind its input: per topic partition and summarised as Spark's built-in
Kafka source does (``avgOffsetsBehindLatest``, ``maxOffsetsBehindLatest``,
``minOffsetsBehindLatest``), plus the records behind in total.

Why here: the figures come from offsets only (a batch's end offsets against the latest offsets the
reader saw, or against the cluster's), so the query listener and ``txkafka status`` compute them
alike, without Spark.

Spark's meaning, kept: for every partition of the latest offsets, latest minus the end offset of
the last batch; min and max are whole numbers, avg their mean. A partition that the latest offsets
have and the batch's end does not (new since the batch was planned) counts from offset 0, as the
reader starts a new partition from its earliest offset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import TxKafkaError
from .offsets import PartitionOffsets, TopicPartitionKey, from_offset_json


@dataclass(frozen=True)
class Lag:
    """Offsets behind latest, per partition and summarised (Spark's names in ``metrics``)."""

    partitions: dict[TopicPartitionKey, int]

    @property
    def total(self) -> int:
        return sum(self.partitions.values())

    @property
    def max(self) -> int:
        return max(self.partitions.values(), default=0)

    @property
    def min(self) -> int:
        return min(self.partitions.values(), default=0)

    @property
    def avg(self) -> float:
        return self.total / len(self.partitions) if self.partitions else 0.0

    def metrics(self) -> dict[str, str]:
        """Spark's ``sources[].metrics`` of its Kafka source, as strings the same way; empty when
        no partition is known (Spark's then too)."""
        if not self.partitions:
            return {}
        return {"avgOffsetsBehindLatest": str(self.avg),
                "maxOffsetsBehindLatest": str(self.max),
                "minOffsetsBehindLatest": str(self.min)}

    def to_json(self) -> dict[str, Any]:
        topics: dict[str, dict[str, int]] = {}
        for (t, p), n in sorted(self.partitions.items()):
            topics.setdefault(t, {})[str(p)] = n
        return {"avgOffsetsBehindLatest": self.avg, "maxOffsetsBehindLatest": self.max,
                "minOffsetsBehindLatest": self.min, "recordsBehindLatest": self.total,
                "partitions": topics}


def lag_between(end: Mapping[TopicPartitionKey, int],
                latest: Mapping[TopicPartitionKey, int]) -> Lag:
    """Offsets behind ``latest`` of a reader whose last batch ended at ``end`` (never negative:
    a latest offset read before the batch's end was planned is not "ahead")."""
    return Lag({tp: max(0, off - end.get(tp, 0)) for tp, off in latest.items()})


def parse_offsets(raw: str | Mapping[str, Any] | None) -> PartitionOffsets | None:
    """A progress event's offset (JSON text or an object) as partition offsets; None when it is
    absent or not a Kafka-shaped offset (another source's)."""
    if raw is None:
        return None
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
        return from_offset_json(data) if isinstance(data, Mapping) else None
    except (ValueError, TypeError, TxKafkaError):  # another source's offset, or a newer one
        return None


def progress_lag(end_offset: str | Mapping[str, Any] | None,
                 latest_offset: str | Mapping[str, Any] | None) -> Lag | None:
    """The lag one source of a query progress shows (its ``endOffset`` against its
    ``latestOffset``), or None when the source does not report both as Kafka offsets."""
    end, latest = parse_offsets(end_offset), parse_offsets(latest_offset)
    if end is None or latest is None or not latest:
        return None
    return lag_between(end, latest)
