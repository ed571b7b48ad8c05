"""Admission control, range planning with data-loss detection, and range splitting."""

import logging
import random

import pytest

from python_datasource.kafka_reader import KafkaBatchReader
from txkafka.connector.errors import DataLossError
from txkafka.connector.source.range_planner import (
    AdmissionControl,
    OffsetRange,
    plan_ranges,
    rate_limit,
    readable,
    split_ranges,
)

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


# ---- maxOffsetsPerTrigger ------------------------------------------------------------------


def test_rate_limit_splits_in_proportion_to_backlog():
    start = {A0: 0, A1: 100, B0: 0}
    latest = {A0: 600, A1: 400, B0: 100}  # backlog 600, 300, 100
    end = rate_limit(100, start, latest, {})
    assert end == {A0: 60, A1: 130, B0: 10}


def test_rate_limit_never_starves_small_partitions_nor_passes_latest():
    start = {A0: 0, A1: 0}
    latest = {A0: 10_000, A1: 3}
    end = rate_limit(10, start, latest, {})
    assert end[A1] == 1  # share 0.003 rounds up to one offset
    assert end[A0] == 9
    assert rate_limit(10**9, start, latest, {}) == latest


def test_rate_limit_counts_new_partitions_from_earliest():
    end = rate_limit(10, {A0: 0}, {A0: 100, B0: 150}, {B0: 50})
    assert end == {A0: 5, B0: 55}


def test_rate_limit_without_backlog_returns_latest():
    assert rate_limit(5, {A0: 7}, {A0: 7}, {}) == {A0: 7}


# ---- minOffsetsPerTrigger + maxTriggerDelay ---------------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_min_offsets_waits_until_enough_data_or_the_delay():
    clock = FakeClock()
    ac = AdmissionControl(None, 50, 60_000, clock=clock)
    # The first trigger always fires (like Spark).
    assert ac.end_offsets({A0: 0}, {A0: 10}, {}, max_rows=None, min_rows=50) == {A0: 10}
    clock.now += 5
    assert ac.end_offsets({A0: 10}, {A0: 40}, {}, max_rows=None, min_rows=50) is None
    assert ac.end_offsets({A0: 10}, {A0: 60}, {}, max_rows=None, min_rows=50) == {A0: 60}
    clock.now += 30
    assert ac.end_offsets({A0: 60}, {A0: 61}, {}, max_rows=None, min_rows=50) is None
    clock.now += 31  # 61 s since the last batch > maxTriggerDelay
    assert ac.end_offsets({A0: 60}, {A0: 61}, {}, max_rows=None, min_rows=50) == {A0: 61}


def test_min_and_max_together():
    ac = AdmissionControl(20, 5, 60_000, clock=FakeClock())
    assert ac.end_offsets({A0: 0}, {A0: 100}, {}, max_rows=20, min_rows=5) == {A0: 20}


# ---- ranges and data loss ------------------------------------------------------------------


def test_plain_ranges_drop_empty_ones():
    ranges = plan_ranges({A0: 5, A1: 9}, {A0: 8, A1: 9}, earliest={A0: 0, A1: 0},
                         fail_on_data_loss=True)
    assert ranges == [OffsetRange("a", 0, 5, 8)]


def test_new_partition_starts_at_earliest_zero():
    ranges = plan_ranges({A0: 5}, {A0: 5, B0: 4}, earliest={B0: 0}, fail_on_data_loss=True)
    assert ranges == [OffsetRange("b", 0, 0, 4)]


def test_new_partition_with_deleted_head_is_data_loss():
    with pytest.raises(DataLossError, match="new partition 0 of topic 'b' starts at offset 3"):
        plan_ranges({}, {B0: 9}, earliest={B0: 3}, fail_on_data_loss=True)
    planned = plan_ranges({}, {B0: 9}, earliest={B0: 3}, fail_on_data_loss=False)
    assert planned == [OffsetRange("b", 0, 0, 9)]  # planned from 0, like any replay of it
    assert readable(planned, {B0: 3}) == [OffsetRange("b", 0, 3, 9)]


def test_deleted_partition_is_data_loss(caplog):
    with pytest.raises(DataLossError, match="topic 'a' partition 1 no longer exists.*offset 9"):
        plan_ranges({A0: 1, A1: 9}, {A0: 2}, earliest={A0: 0}, fail_on_data_loss=True)
    with caplog.at_level(logging.WARNING, logger="txkafka.reader"):
        assert plan_ranges({A0: 1, A1: 9}, {A0: 2}, earliest={A0: 0},
                           fail_on_data_loss=False) == [OffsetRange("a", 0, 1, 2)]
    assert "partition 1 no longer exists" in caplog.text
    assert "failOnDataLoss=false" in caplog.text


def test_offsets_going_backwards_is_data_loss():
    with pytest.raises(DataLossError, match=r"offsets went backwards from 50 to 10.*failOnDataLoss"):
        plan_ranges({A0: 50}, {A0: 10}, earliest={A0: 0}, fail_on_data_loss=True)
    assert plan_ranges({A0: 50}, {A0: 10}, earliest={A0: 0}, fail_on_data_loss=False) == []


def test_offsets_going_backwards_names_what_going_on_skips(caplog):
    """The log was re-created (or an unclean election truncated it): going on from the new end
    skips the new log's records below it, and the old log's past the old position."""
    with caplog.at_level(logging.WARNING, logger="txkafka.reader"):
        assert plan_ranges({A0: 50}, {A0: 10}, earliest={A0: 0}, fail_on_data_loss=False) == []
    assert "skips the partition's records at offsets [0, 10), and any the log held past " \
           "offset 50 before" in caplog.text


def test_retention_is_data_loss_naming_the_offsets():
    with pytest.raises(DataLossError, match=r"offsets \[10, 40\) were deleted.*earliest available "
                                            r"offset is 40"):
        plan_ranges({A0: 10}, {A0: 60}, earliest={A0: 40}, fail_on_data_loss=True)
    planned = plan_ranges({A0: 10}, {A0: 60}, earliest={A0: 40}, fail_on_data_loss=False)
    assert readable(planned, {A0: 40}) == [OffsetRange("a", 0, 40, 60)]
    # Everything of the range gone: an empty task, in its place.
    planned = plan_ranges({A0: 10}, {A0: 30}, earliest={A0: 40}, fail_on_data_loss=False)
    assert readable(planned, {A0: 40}) == [OffsetRange("a", 0, 30, 30)]


def test_retention_or_deletion_before_a_replay_moves_no_task_to_another_index():
    """The exactly-once sink re-writes a lost task partition by its index when a batch runs again:
    the same offsets must give the same tasks however the broker changed in between."""
    start, end = {A0: 0, A1: 0}, {A0: 1000, A1: 1000}

    def tasks(earliest):
        planned = plan_ranges(start, end, earliest=earliest, fail_on_data_loss=False)
        return readable(split_ranges(planned, min_partitions=4), earliest)

    first = tasks({A0: 0, A1: 0})
    assert [(r.partition, r.start, r.end) for r in first] == [
        (0, 0, 500), (0, 500, 1000), (1, 0, 500), (1, 500, 1000)]
    after_retention = tasks({A0: 600, A1: 0})
    assert [(r.partition, r.end) for r in after_retention] == [(r.partition, r.end) for r in first]
    assert [(r.start, r.end) for r in after_retention[:2]] == [(500, 500), (600, 1000)]
    assert after_retention[2:] == first[2:]
    partition_deleted = tasks({A1: 0})
    assert [r.size for r in partition_deleted[:2]] == [0, 0] and partition_deleted[2:] == first[2:]


def test_partition_gone_between_steps_is_data_loss():
    with pytest.raises(DataLossError, match="disappeared before offsets \\[3, 8\\)"):
        plan_ranges({A0: 3}, {A0: 8}, earliest={}, fail_on_data_loss=True)


def test_a_batch_read_s_earliest_start_is_bound_by_its_first_task_only():
    """startingOffsets=earliest of a batch read: the log start moving past it before planning is
    no loss, and the task reading from it binds it again (FetchTask.earliest_start); later pieces
    of the partition start at offsets the planning chose, so losing theirs still is."""
    planned = plan_ranges({A0: 0, A1: 0}, {A0: 100, A1: 100}, earliest={A0: 30, A1: 0},
                          fail_on_data_loss=True, at_log_start={A0})
    assert planned == [OffsetRange("a", 0, 0, 100, True), OffsetRange("a", 1, 0, 100)]
    pieces = readable(split_ranges(planned[:1], min_partitions=2), {A0: 30})
    assert pieces == [OffsetRange("a", 0, 30, 50, True), OffsetRange("a", 0, 50, 100)]
    with pytest.raises(DataLossError, match=r"partition 1: offsets \[0, 30\) were deleted"):
        plan_ranges({A1: 0}, {A1: 100}, earliest={A1: 30}, fail_on_data_loss=True,
                    at_log_start={A0})


def test_a_batch_read_marks_only_the_starts_that_are_earliest():
    from tests.test_reader_stream_start import FakeLogs

    r = KafkaBatchReader({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "a",
                          "startingOffsets": '{"a": {"0": -2, "1": 3}}', "minPartitions": "3"},
                         None)
    r._offset_reader = FakeLogs({A0: (0, 20), A1: (0, 20)})
    assert [(t.partition, t.start, t.end, t.earliest_start) for t in
            (p.task for p in r.partitions())] == [
        (0, 0, 10, True), (0, 10, 20, False), (1, 3, 20, False)]


# ---- splitting -----------------------------------------------------------------------------


def _assert_exact_cover(original, pieces):
    by_tp = {}
    for p in pieces:
        by_tp.setdefault((p.topic, p.partition), []).append(p)
    for r in original:
        mine = sorted(by_tp.pop((r.topic, r.partition), []))
        if r.size == 0:
            assert not mine
            continue
        assert mine[0].start == r.start and mine[-1].end == r.end
        for x, y in zip(mine, mine[1:]):
            assert x.end == y.start  # contiguous: no gap, no overlap
        assert all(p.size > 0 for p in mine)
    assert not by_tp


def test_no_options_one_task_per_partition():
    ranges = [OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 5, 5)]
    assert split_ranges(ranges) == [OffsetRange("a", 0, 0, 100)]


def test_max_records_per_partition():
    pieces = split_ranges([OffsetRange("a", 0, 0, 10)], max_records_per_partition=3)
    assert [(p.start, p.end) for p in pieces] == [(0, 3), (3, 6), (6, 8), (8, 10)]


def test_min_partitions_splits_the_biggest_ranges():
    ranges = [OffsetRange("a", 0, 0, 900), OffsetRange("a", 1, 0, 100)]
    pieces = split_ranges(ranges, min_partitions=10)
    assert len(pieces) == 10
    assert sum(1 for p in pieces if p.partition == 0) == 9
    _assert_exact_cover(ranges, pieces)


def test_min_partitions_cannot_split_below_one_offset():
    pieces = split_ranges([OffsetRange("a", 0, 0, 3)], min_partitions=10)
    assert [(p.start, p.end) for p in pieces] == [(0, 1), (1, 2), (2, 3)]


def test_splitting_always_covers_exactly(seed=7):
    rnd = random.Random(seed)
    for _ in range(300):
        ranges = []
        for p in range(rnd.randint(1, 6)):
            s = rnd.randint(0, 1000)
            ranges.append(OffsetRange("t", p, s, s + rnd.randint(0, 500)))
        pieces = split_ranges(ranges, min_partitions=rnd.choice([None, 1, 5, 17, 64]),
                              max_records_per_partition=rnd.choice([None, 1, 7, 100, 10**6]))
        _assert_exact_cover(ranges, pieces)
