"""Batch 0 of the stream reader: it reads data at once only from explicit offsets; any other start
(earliest, latest, timestamps) is pinned in Spark's offset log by an empty batch 0.

The offset look-ups are faked (a log per partition with a start and an end that tests move), the
planning is the stream reader's own; the same behaviour against a real broker and Spark is in
integration_tests/test_reader_streaming.py.
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from python_datasource.kafka_reader import KafkaMicroBatchStream
from txkafka.connector.errors import DataLossError
from txkafka.connector.kafka_offset_reader import KafkaOffsetReader

T0, T1 = ("t", 0), ("t", 1)


class FakeLogs(KafkaOffsetReader):
    """KafkaOffsetReader with its network calls answered from ``logs`` ({tp: [start, end)})."""

    def __init__(self, logs: dict) -> None:  # no super().__init__: no client is ever made
        self.logs = logs
        self.calls: list[str] = []

    def check_assignment(self) -> None:
        pass

    def topic_partitions(self):
        return sorted(self.logs)

    def earliest_offsets(self, tps):
        self.calls.append("earliest")
        return {tp: self.logs[tp][0] for tp in tps if tp in self.logs}

    def latest_offsets(self, tps, **_):
        self.calls.append("latest")
        return {tp: self.logs[tp][1] for tp in tps if tp in self.logs}

    def high_watermarks(self, tps):
        return self.latest_offsets(tps)

    def close(self) -> None:
        pass


def stream(logs: dict, **options) -> tuple[KafkaMicroBatchStream, FakeLogs]:
    opts = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", **options}
    s = KafkaMicroBatchStream(opts, None)
    fake = FakeLogs(logs)
    s._offset_reader = fake
    return s, fake


def ranges(parts) -> list[tuple[int, int, int]]:
    return [(p.task.partition, p.task.start, p.task.end) for p in parts]


def test_earliest_is_pinned_by_an_empty_batch_0_then_read_from_there():
    s, _ = stream({T0: (5, 25), T1: (0, 10)}, startingOffsets="earliest")
    start = s.initialOffset()
    end = s.latestOffset(start, ReadAllAvailable())
    assert json.loads(json.dumps(end)) == {"t": {"0": 5, "1": 0}}  # the log starts, pinned
    assert s.partitions(start, end) == []
    end1 = s.latestOffset(end, ReadAllAvailable())
    assert ranges(s.partitions(end, end1)) == [(0, 5, 25), (1, 0, 10)]


def test_earliest_then_max_offsets_per_trigger():
    s, _ = stream({T0: (0, 100), T1: (0, 100)}, startingOffsets="earliest",
                  maxOffsetsPerTrigger="20")
    start = s.initialOffset()
    end = s.latestOffset(start, s.getDefaultReadLimit())
    assert end == {"t": {"0": 0, "1": 0}} and s.partitions(start, end) == []
    end1 = s.latestOffset(end, ReadMaxRows(20))
    assert ranges(s.partitions(end, end1)) == [(0, 0, 10), (1, 0, 10)]


def test_retention_before_a_replay_is_reported_not_skipped_silently():
    """The start of the first batch that reads is in Spark's offset log: retention that removes
    records before a replay of that batch is data loss, as in any later batch (re-resolving
    "earliest" would have started later without a word)."""
    logs = {T0: (0, 20)}
    first, _ = stream(logs, startingOffsets="earliest")
    pinned = first.latestOffset(first.initialOffset(), ReadAllAvailable())
    end = first.latestOffset(pinned, ReadAllAvailable())
    assert ranges(first.partitions(pinned, end)) == [(0, 0, 20)]
    logs[T0] = (8, 30)  # records 0-7 deleted before the replay
    restarted, _ = stream(logs, startingOffsets="earliest")
    with pytest.raises(DataLossError, match=r"offsets \[0, 8\) were deleted"):
        restarted.partitions(pinned, end)
    tolerant, _ = stream(logs, startingOffsets="earliest", failOnDataLoss="false")
    assert ranges(tolerant.partitions(pinned, end)) == [(0, 8, 20)]


def test_explicit_offsets_read_in_batch_0_and_replay_identically():
    logs = {T0: (0, 50), T1: (0, 50)}
    spec = json.dumps({"t": {"0": 7, "1": 0}})
    first, _ = stream(logs, startingOffsets=spec)
    end = first.latestOffset(first.initialOffset(), ReadAllAvailable())
    assert ranges(first.partitions(first.initialOffset(), end)) == [(0, 7, 50), (1, 0, 50)]
    logs[T0] = (0, 70)
    restarted, _ = stream(logs, startingOffsets=spec)
    assert ranges(restarted.partitions(restarted.initialOffset(), end)) == [(0, 7, 50), (1, 0, 50)]


@pytest.mark.parametrize("starting", ["latest", json.dumps({"t": {"0": -1, "1": 3}}),
                                      json.dumps({"t": {"0": -2, "1": 3}})])
def test_a_start_that_can_change_is_pinned_by_an_empty_batch_0(starting):
    logs = {T0: (0, 50), T1: (0, 50)}
    s, _ = stream(logs, startingOffsets=starting)
    start = s.initialOffset()
    end = s.latestOffset(start, ReadAllAvailable())
    assert s.partitions(start, end) == []
    pinned = {"0": 0 if '"0": -2' in starting else 50, "1": 50 if starting == "latest" else 3}
    assert end == {"t": pinned}
    # A replay of batch 0 after new records arrived still reads nothing (the end is logged) ...
    logs[T0] = (0, 90)
    restarted, _ = stream(logs, startingOffsets=starting)
    assert restarted.partitions(restarted.initialOffset(), end) == []
    # ... and batch 1 starts exactly at the pinned offsets.
    end1 = restarted.latestOffset(end, ReadAllAvailable())
    assert ranges(restarted.partitions(end, end1)) == sorted(
        [(0, pinned["0"], 90)] + ([(1, 3, 50)] if starting != "latest" else []))


def test_earliest_on_an_empty_topic_gives_an_empty_batch_0_then_reads_from_the_start():
    logs = {T0: (0, 0)}
    s, _ = stream(logs, startingOffsets="earliest")
    start = s.initialOffset()
    end = s.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 0}} and s.partitions(start, end) == []
    logs[T0] = (0, 4)
    end1 = s.latestOffset(end, ReadAllAvailable())
    assert ranges(s.partitions(end, end1)) == [(0, 0, 4)]
