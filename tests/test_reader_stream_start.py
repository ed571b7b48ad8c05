"""Batch 0 of the stream reader: it reads data at once from any start, and its end (which Spark logs
and hands back on replay) carries the resolved start, so a replay reads exactly the same ranges
whatever "earliest", "latest" or a timestamp would resolve to by then.

The offset look-ups are faked (a log per partition with a start and an end that tests move), the
planning is the stream reader's own; the same behaviour against a real broker and Spark is in
integration_tests/test_reader_streaming.py.
"""

from __future__ import annotations

import json
import logging

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from python_datasource.kafka_reader import KafkaMicroBatchStream
from txkafka.connector.errors import DataLossError, KafkaConfigError
from txkafka.connector.source.offset_reader import KafkaOffsetReader
from txkafka.connector.source.offsets import from_offset_json

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
    fake.options = s.options
    s._offset_reader = fake
    return s, fake


def ranges(parts) -> list[tuple[int, int, int]]:
    return [(p.task.partition, p.task.start, p.task.end) for p in parts]


def logged(offset: dict) -> dict:
    """What Spark hands back after writing ``offset`` to offsets/N and reading it again."""
    return json.loads(json.dumps(offset))


def test_earliest_reads_in_batch_0_and_its_end_carries_the_start():
    s, _ = stream({T0: (5, 25), T1: (0, 10)}, startingOffsets="earliest")
    start = s.initialOffset()
    end = logged(s.latestOffset(start, ReadAllAvailable()))
    assert end == {"t": {"0": 25, "1": 10}, "txkafka:start": {"t": {"0": 5, "1": 0}}}
    assert ranges(s.partitions(start, end)) == [(0, 5, 25), (1, 0, 10)]


def test_a_replay_of_batch_0_reads_the_same_ranges_after_the_log_moved():
    logs = {T0: (5, 25), T1: (0, 10)}
    first, _ = stream(logs, startingOffsets="earliest")
    end = logged(first.latestOffset(first.initialOffset(), ReadAllAvailable()))
    logs[T0], logs[T1] = (5, 60), (0, 40)  # new records before the restart
    restarted, _ = stream(logs, startingOffsets="earliest")
    assert ranges(restarted.partitions(restarted.initialOffset(), end)) == [(0, 5, 25), (1, 0, 10)]


def test_no_new_data_after_batch_0_gives_the_same_offset_text():
    """Spark compares offsets as JSON text: a different text for the same position would run an
    empty batch 1."""
    s, _ = stream({T0: (0, 20)}, startingOffsets="earliest")
    end0 = logged(s.latestOffset(s.initialOffset(), ReadAllAvailable()))
    again = s.latestOffset(end0, ReadAllAvailable())
    assert json.dumps(again) == json.dumps(end0)


def test_batch_1_reads_from_batch_0s_end_and_drops_the_carried_start():
    logs = {T0: (0, 20)}
    s, _ = stream(logs, startingOffsets="earliest")
    end0 = logged(s.latestOffset(s.initialOffset(), ReadAllAvailable()))
    logs[T0] = (0, 35)
    end1 = logged(s.latestOffset(end0, ReadAllAvailable()))
    assert end1 == {"t": {"0": 35}}
    assert ranges(s.partitions(end0, end1)) == [(0, 20, 35)]


def test_earliest_then_max_offsets_per_trigger():
    s, _ = stream({T0: (0, 100), T1: (0, 100)}, startingOffsets="earliest",
                  maxOffsetsPerTrigger="20")
    start = s.initialOffset()
    end = logged(s.latestOffset(start, s.getDefaultReadLimit()))
    assert ranges(s.partitions(start, end)) == [(0, 0, 10), (1, 0, 10)]
    end1 = logged(s.latestOffset(end, ReadMaxRows(20)))
    assert ranges(s.partitions(end, end1)) == [(0, 10, 20), (1, 10, 20)]


def test_retention_before_a_replay_of_batch_0_is_reported_not_skipped_silently():
    """Batch 0's start is in the logged end: retention that removes records before a replay is
    data loss, as in any later batch (re-resolving "earliest" would have started later without a
    word)."""
    logs = {T0: (0, 20)}
    first, _ = stream(logs, startingOffsets="earliest")
    end = logged(first.latestOffset(first.initialOffset(), ReadAllAvailable()))
    logs[T0] = (8, 30)  # records 0-7 deleted before the replay
    restarted, _ = stream(logs, startingOffsets="earliest")
    with pytest.raises(DataLossError, match=r"offsets \[0, 8\) were deleted"):
        restarted.partitions(restarted.initialOffset(), end)
    tolerant, _ = stream(logs, startingOffsets="earliest", failOnDataLoss="false")
    assert ranges(tolerant.partitions(tolerant.initialOffset(), end)) == [(0, 8, 20)]


def test_explicit_offsets_read_in_batch_0_and_replay_identically():
    logs = {T0: (0, 50), T1: (0, 50)}
    spec = json.dumps({"t": {"0": 7, "1": 0}})
    first, _ = stream(logs, startingOffsets=spec)
    end = logged(first.latestOffset(first.initialOffset(), ReadAllAvailable()))
    assert ranges(first.partitions(first.initialOffset(), end)) == [(0, 7, 50), (1, 0, 50)]
    logs[T0] = (0, 70)
    restarted, _ = stream(logs, startingOffsets=spec)
    assert ranges(restarted.partitions(restarted.initialOffset(), end)) == [(0, 7, 50), (1, 0, 50)]


@pytest.mark.parametrize("starting, batch_0", [
    ("latest", []),
    (json.dumps({"t": {"0": -1, "1": 3}}), [(1, 3, 50)]),
    (json.dumps({"t": {"0": -2, "1": 3}}), [(0, 0, 50), (1, 3, 50)]),
])
def test_a_start_that_can_change_is_read_from_where_it_resolved_first(starting, batch_0):
    logs = {T0: (0, 50), T1: (0, 50)}
    s, _ = stream(logs, startingOffsets=starting)
    start = s.initialOffset()
    end = logged(s.latestOffset(start, ReadAllAvailable()))
    assert ranges(s.partitions(start, end)) == batch_0
    # A replay of batch 0 after new records arrived reads the same (the start is in the end) ...
    logs[T0] = (0, 90)
    restarted, _ = stream(logs, startingOffsets=starting)
    assert ranges(restarted.partitions(restarted.initialOffset(), end)) == batch_0
    # ... and batch 1 starts exactly at batch 0's end.
    end1 = logged(restarted.latestOffset(end, ReadAllAvailable()))
    assert ranges(restarted.partitions(end, end1)) == [(0, 50, 90)]


def test_earliest_on_an_empty_topic_gives_an_empty_batch_0_then_reads_from_the_start():
    logs = {T0: (0, 0)}
    s, _ = stream(logs, startingOffsets="earliest")
    start = s.initialOffset()
    end = logged(s.latestOffset(start, ReadAllAvailable()))
    assert from_offset_json(end) == {T0: 0} and s.partitions(start, end) == []
    logs[T0] = (0, 4)
    end1 = logged(s.latestOffset(end, ReadAllAvailable()))
    assert ranges(s.partitions(end, end1)) == [(0, 0, 4)]


def test_batch_0_waiting_for_min_offsets_still_logs_its_start():
    """Below minOffsetsPerTrigger batch 0 runs empty with the start in its end: waiting instead
    would resolve "latest" again at the next trigger and skip what arrived meanwhile."""
    logs = {T0: (0, 10)}
    s, _ = stream(logs, startingOffsets="latest", minOffsetsPerTrigger="5",
                  maxTriggerDelay="1h")
    start = s.initialOffset()
    end = logged(s.latestOffset(start, ReadMinRows(5)))
    assert end == {"t": {"0": 10}, "txkafka:start": {"t": {"0": 10}}}
    assert s.partitions(start, end) == []
    logs[T0] = (0, 13)
    assert json.dumps(s.latestOffset(end, ReadMinRows(5))) == json.dumps(end)  # still waiting
    logs[T0] = (0, 16)
    end1 = logged(s.latestOffset(end, ReadMinRows(5)))
    assert ranges(s.partitions(end, end1)) == [(0, 10, 16)]


@pytest.mark.parametrize("starting, batch_0", [
    ("earliest", []),
    (json.dumps({"t": {"0": 7}}), [(0, 7, 20)]),
])
def test_a_checkpoint_from_before_the_carried_start_replays_as_it_was_planned(starting, batch_0):
    """Older checkpoints: batch 0's end has no carried start. It was an empty batch pinning the
    start, except from explicit offsets, which read data and resolve the same again."""
    logs = {T0: (0, 20)}
    s, _ = stream(logs, startingOffsets=starting)
    old_end = {"t": {"0": 0 if starting == "earliest" else 20}}
    assert ranges(s.partitions(s.initialOffset(), old_end)) == batch_0


def test_a_partition_deleted_before_batch_0_s_end_was_chosen_is_reported():
    """Between resolving the start and fetching the latest offsets a partition was deleted: batch 0
    reports it like any later batch (plan_ranges), it is not dropped silently."""
    logs = {T0: (0, 10), T1: (0, 10)}

    def deleted_after_start(s: KafkaMicroBatchStream) -> dict:
        resolve = s._offset_reader.earliest_offsets

        def earliest_then_delete(tps):
            out = resolve(tps)
            logs.pop(T1, None)
            return out

        s._offset_reader.earliest_offsets = earliest_then_delete
        return logged(s.latestOffset(s.initialOffset(), ReadAllAvailable()))

    s, _ = stream(logs, startingOffsets="earliest")
    end = deleted_after_start(s)
    with pytest.raises(DataLossError, match="partition 1 no longer exists"):
        s.partitions(s.initialOffset(), end)
    logs[T1] = (0, 10)
    tolerant, _ = stream(logs, startingOffsets="earliest", failOnDataLoss="false")
    end = deleted_after_start(tolerant)
    assert ranges(tolerant.partitions(tolerant.initialOffset(), end)) == [(0, 0, 10)]


def test_one_metadata_answer_without_a_topic_does_not_end_a_batch_without_it():
    """A broker out of step answers "unknown topic" for a live topic once: the end Spark logs
    still has the partition (an end without it would make every replay of the batch report it
    deleted, or drop it and later read it again from 0)."""
    logs = {T0: (0, 10), T1: (0, 10)}
    s, fake = stream(logs, startingOffsets="earliest", **{"fetchOffset.retryIntervalMs": "0"})
    end0 = logged(s.latestOffset(s.initialOffset(), ReadAllAvailable()))
    logs[T0], logs[T1] = (0, 20), (0, 20)
    answers = [[T0]]  # the next metadata answer lacks T1; later ones are whole again
    listed = fake.topic_partitions
    fake.topic_partitions = lambda: answers.pop(0) if answers else listed()
    end1 = logged(s.latestOffset(end0, ReadAllAvailable()))
    assert from_offset_json(end1) == {T0: 20, T1: 20}
    assert ranges(s.partitions(end0, end1)) == [(0, 10, 20), (1, 10, 20)]


def test_offsets_going_backwards_name_the_records_going_on_skips(caplog):
    logs = {T0: (0, 50)}
    s, _ = stream(logs, startingOffsets="earliest", failOnDataLoss="false")
    end0 = logged(s.latestOffset(s.initialOffset(), ReadAllAvailable()))
    logs[T0] = (0, 10)  # the topic re-created, 10 records written since
    end1 = logged(s.latestOffset(end0, ReadAllAvailable()))
    with caplog.at_level(logging.WARNING, logger="txkafka.reader"):
        assert s.partitions(end0, end1) == []
    assert "offsets went backwards from 50 to 10" in caplog.text
    assert "records at offsets [0, 10)" in caplog.text


def test_batch_0_logged_by_another_source_is_refused_not_skipped():
    """Spark's format("kafka") stopped in its first batch, the query restarted on txkafka: the
    logged end has no carried start and lies past where "earliest" resolves, so batch 0 read
    records that txkafka cannot place. Reading nothing would skip them: refused, with the fix."""
    logs = {T0: (0, 30)}
    s, _ = stream(logs, startingOffsets="earliest")
    with pytest.raises(KafkaConfigError, match=r"another source wrote it.*sources/0/0"):
        s.partitions(s.initialOffset(), {"t": {"0": 20}})


def test_batch_0_of_another_source_replays_from_the_start_it_kept():
    """The fix the refusal names: startingOffsets set to the built-in source's kept start."""
    logs = {T0: (0, 30)}
    s, _ = stream(logs, startingOffsets=json.dumps({"t": {"0": 0}}))
    assert ranges(s.partitions(s.initialOffset(), {"t": {"0": 20}})) == [(0, 0, 20)]
