"""The reader's offset: ``{"topic": {"partition": nextOffset}}``, Spark's Kafka shape.

Why: Spark stores the offset verbatim as JSON in the checkpoint's ``offsets/N`` and decides whether
there is new data by comparing JSON strings. So the dict must always be built in one order (sorted
topics, numeric partition order, string partition keys): two equal offsets must serialise to the same
text, or Spark runs empty batches forever. After a restart the partition keys come back as strings,
so parsing accepts both.
"""

from __future__ import annotations

from typing import Any, Mapping

from .errors import KafkaConfigError
from .source_options import TopicPartitionKey

PartitionOffsets = dict[TopicPartitionKey, int]


def to_offset_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """The canonical, JSON-ready form: topics sorted, partitions in numeric order, string keys."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_offset_json(data: Mapping[str, Any] | None) -> PartitionOffsets:
    """Parse an offset from Spark (fresh or read back from ``offsets/N``) into (topic, partition) keys."""
    if not data:
        return {}
    if not isinstance(data, Mapping):
        raise KafkaConfigError(f"not a txkafka offset (expected a JSON object): {data!r}")
    out: PartitionOffsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, Mapping):
            raise KafkaConfigError(
                f"not a txkafka offset: topic {topic!r} maps to {parts!r}, expected "
                "{partition: offset}. Was this checkpoint written by another source?")
        for p, off in parts.items():
            try:
                out[(str(topic), int(p))] = int(off)
            except (TypeError, ValueError):
                raise KafkaConfigError(
                    f"not a txkafka offset: topic {topic!r} partition {p!r} -> {off!r}") from None
    return out


def describe_offsets(offsets: Mapping[TopicPartitionKey, int], limit: int = 10) -> str:
    """Short human form for messages: ``t-0@12, t-1@40 (+3 more)``."""
    items = [f"{t}-{p}@{offsets[(t, p)]}" for t, p in sorted(offsets)]
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
