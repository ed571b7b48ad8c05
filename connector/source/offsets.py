"""The reader's offset: ``{"topic": {"partition": nextOffset}}``, Spark's Kafka shape.

Why: Spark stores the offset verbatim as JSON in the checkpoint's ``offsets/N`` and decides whether
there is new data by comparing JSON strings. So the dict must always be built in one order (sorted
topics, numeric partition order, string partition keys): two equal offsets must serialise to the same
text, or Spark runs empty batches forever. After a restart the partition keys come back as strings,
so parsing accepts both.

Batch 0's end also carries the batch's start under ``"txkafka:start"`` (':' cannot occur in a topic
name): Spark logs only a batch's end and, replaying batch 0, asks ``initialOffset()`` again, which
for ``earliest``/``latest``/timestamps could resolve elsewhere. The logged end is what Spark hands
back on replay, so the start travels inside it.

The offset's format version (connector/formats.py, ``SOURCE_OFFSET``) is the key
``"txkafka:format"``, absent in format 1: so today's offset is the text txkafka 0.1.0 wrote and
reads, and it does not change across an upgrade (Spark compares the texts). A later format that changes the shape writes the key, and this txkafka
refuses an offset carrying a format it does not read (NewerFormatError) instead of misreading it.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..errors import KafkaConfigError
from ..formats import SOURCE_OFFSET, check_version
from .options import TopicPartitionKey

PartitionOffsets = dict[TopicPartitionKey, int]

BATCH_START_KEY = "txkafka:start"
FORMAT_KEY = "txkafka:format"


def to_offset_json(offsets: Mapping[TopicPartitionKey, int], *,
                   batch_start: Mapping[TopicPartitionKey, int] | None = None) -> dict[str, Any]:
    """The canonical, JSON-ready form: topics sorted, partitions in numeric order, string keys;
    ``batch_start`` (batch 0's resolved start) last, under BATCH_START_KEY."""
    out: dict[str, Any] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    if batch_start is not None:
        out[BATCH_START_KEY] = to_offset_json(batch_start)
    return out


def batch_start_of(data: Mapping[str, Any] | None) -> PartitionOffsets | None:
    """The start carried by batch 0's end offset, None for any other offset."""
    if not data or not isinstance(data, Mapping) or BATCH_START_KEY not in data:
        return None
    return from_offset_json(data[BATCH_START_KEY])


def from_offset_json(data: Mapping[str, Any] | None, *, file: str | None = None,
                     checkpoint: str | None = None) -> PartitionOffsets:
    """Parse an offset from Spark (fresh or read back from ``offsets/N``) into (topic, partition) keys.

    ``file`` and ``checkpoint`` name where the offset was read, for a NewerFormatError: the
    commands that read ``offsets/N`` know them; the query's reader is handed the offset alone
    (a Python data source is not told its checkpoint), so its message shows the offset."""
    if not data:
        return {}
    if not isinstance(data, Mapping):
        raise KafkaConfigError(f"not a txkafka offset (expected a JSON object): {data!r}")
    if FORMAT_KEY in data:
        shown = json.dumps(dict(data), separators=(",", ":"), default=str)
        shown = shown if len(shown) <= 200 else shown[:200] + "..."
        file = file or "Spark's <checkpoint>/offsets/<batch>"
        check_version(SOURCE_OFFSET, data[FORMAT_KEY],
                      f"the source offset {shown} (a line of {file})",
                      damaged=KafkaConfigError, checkpoint=checkpoint)
    out: PartitionOffsets = {}
    for topic, parts in data.items():
        if topic in (BATCH_START_KEY, FORMAT_KEY):
            continue  # batch 0's start, not a position (see batch_start_of); the format
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
