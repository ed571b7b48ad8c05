"""Planning a trigger: how far to read (admission control) and which offset ranges become tasks.

Why: these are the decisions that make a batch correct and replayable. The end offsets chosen here are
logged by Spark and replayed verbatim after a crash; the ranges must cover exactly [start, end) of every
partition, except where records are provably gone (data loss, reported with topic, partition and
offsets, or skipped with a warning under ``failOnDataLoss=false``). Pure functions over offset maps,
so they are unit-tested without Kafka or Spark.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
import time
from dataclasses import dataclass
from typing import Callable, Collection, Mapping, Optional

from ..errors import DataLossError
from .offsets import PartitionOffsets
from .options import TopicPartitionKey

log = logging.getLogger("txkafka.reader")

_FAIL_HINT = ("Some data may have been lost. If you want the query to skip it and go on, set the "
              "source option failOnDataLoss=false.")
_WARN_HINT = "Some data may have been lost; going on because failOnDataLoss=false."


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records of one topic partition with offsets in [start, end): one Spark task.

    ``earliest_start``: ``start`` is a batch read's startingOffsets "earliest", which the task
    binds to the log start when it runs, as Spark's batch source does (``FetchTask``)."""

    topic: str
    partition: int
    start: int
    end: int
    earliest_start: bool = False

    @property
    def size(self) -> int:
        """Offsets covered; an upper bound of the records (markers and aborted records occupy
        offsets too)."""
        return self.end - self.start


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    """Raise DataLossError, or warn when the user chose to go on."""
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {_FAIL_HINT}")
    log.warning("%s. %s", message, _WARN_HINT)


# ---- admission control -------------------------------------------------------------------


def backlog(start: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int],
            earliest_new: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
    """Offsets waiting per partition (> 0 only). New partitions count from their earliest offset."""
    out: dict[TopicPartitionKey, int] = {}
    for tp, end in latest.items():
        begin = start.get(tp, earliest_new.get(tp))
        if begin is not None and end - begin > 0:
            out[tp] = end - begin
    return out


def rate_limit(limit: int, start: Mapping[TopicPartitionKey, int],
               latest: Mapping[TopicPartitionKey, int],
               earliest_new: Mapping[TopicPartitionKey, int]) -> PartitionOffsets:
    """Cap a batch at about ``limit`` offsets, split across partitions in proportion to backlog.

    As in Spark: a partition's share is floored, but a share below one offset is rounded up so small
    partitions are never starved; no partition ever passes its latest offset.
    """
    sizes = backlog(start, latest, earliest_new)
    total = sum(sizes.values())
    if total <= 0:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        begin = start.get(tp, earliest_new.get(tp, end))
        share = limit * (size / total)
        n = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + n)
    return out


class AdmissionControl:
    """maxOffsetsPerTrigger and minOffsetsPerTrigger + maxTriggerDelay, with the delay's clock."""

    def __init__(self, max_offsets: Optional[int], min_offsets: Optional[int],
                 max_trigger_delay_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_offsets = max_offsets
        self.min_offsets = min_offsets
        self.max_trigger_delay_ms = max_trigger_delay_ms
        self._clock = clock
        self._last_trigger: float | None = None

    def mark_trigger(self) -> None:
        """A batch just ran (e.g. the one resolving the starting offsets): the delay starts now."""
        self._last_trigger = self._clock()

    def end_offsets(self, start: Mapping[TopicPartitionKey, int],
                    latest: Mapping[TopicPartitionKey, int],
                    earliest_new: Mapping[TopicPartitionKey, int], *,
                    max_rows: Optional[int], min_rows: Optional[int]) -> Optional[PartitionOffsets]:
        """The batch's end offsets, or None to wait (fewer than ``min_rows`` offsets and the
        delay not yet over). ``None`` limits mean "not limited" (ReadAllAvailable, AvailableNow)."""
        if min_rows is not None:
            now = self._clock()
            waited_ms = math.inf if self._last_trigger is None else (now - self._last_trigger) * 1000
            if waited_ms < self.max_trigger_delay_ms and \
                    sum(backlog(start, latest, earliest_new).values()) < min_rows:
                return None
            self._last_trigger = now
        if max_rows is not None:
            return rate_limit(max_rows, start, latest, earliest_new)
        return dict(latest)


# ---- ranges ------------------------------------------------------------------------------


def plan_ranges(start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int], *,
                earliest: Mapping[TopicPartitionKey, int], fail_on_data_loss: bool,
                at_log_start: Collection[TopicPartitionKey] = ()) -> list[OffsetRange]:
    """The batch's ranges [start, end) per partition, with every kind of data loss reported.

    The ranges depend only on the offsets (a new partition, in ``end`` but not ``start``, starts
    at 0): the exactly-once sink re-writes a lost task partition of a batch by its index when the
    batch runs again, so the same offsets must give the same tasks however the broker changed in
    between. What the broker no longer holds is cut away afterwards, piece by piece, by
    ``readable``. ``earliest`` holds the current log start offsets of the partitions in ``end``
    (those it lacks are deleted) and is used here for the reports only: a partition in ``start``
    but not ``end`` was deleted; a new partition whose log does not start at 0 lost its head; an end
    below the start means the offsets went backwards; a start below the log start means retention
    (or delete-records) removed records before they were read. Empty ranges are dropped.

    ``at_log_start`` (batch reads only): partitions whose start is startingOffsets "earliest".
    Their log start moving past it is no loss (Spark resolves "earliest" without reporting any):
    their ranges are marked ``earliest_start``, and the task reads from the log start it finds.
    """
    ranges: list[OffsetRange] = []
    for tp in sorted(set(start) - set(end)):
        report_data_loss(
            f"topic {tp[0]!r} partition {tp[1]} no longer exists (topic or partition deleted); "
            f"the query had read it up to offset {start[tp]}", fail_on_data_loss)
    for tp in sorted(end):
        topic, partition = tp
        until = end[tp]
        log_start = earliest.get(tp)
        begin = start.get(tp, 0)
        if until < begin:
            now = f"[{log_start}, {until})" if log_start is not None else f"below {until}"
            report_data_loss(
                f"topic {topic!r} partition {partition}: offsets went backwards from {begin} to "
                f"{until} (topic deleted and re-created, or an unclean leader election); going on "
                f"from {until} skips the partition's records at offsets {now}, and any the log "
                f"held past offset {begin} before", fail_on_data_loss)
            continue
        if until == begin:
            continue
        if log_start is None:
            report_data_loss(
                f"topic {topic!r} partition {partition} disappeared before offsets "
                f"[{begin}, {until}) were read (topic or partition deleted)", fail_on_data_loss)
        elif tp not in start and log_start != 0:
            report_data_loss(
                f"new partition {partition} of topic {topic!r} starts at offset {log_start}, "
                f"not 0: records 0..{log_start - 1} were deleted before the query saw the "
                "partition", fail_on_data_loss)
        elif begin < log_start and tp not in at_log_start:
            report_data_loss(
                f"topic {topic!r} partition {partition}: offsets [{begin}, {min(log_start, until)}) "
                f"were deleted (retention or delete-records) before they were read; the earliest "
                f"available offset is {log_start}", fail_on_data_loss)
        ranges.append(OffsetRange(topic, partition, begin, until, tp in at_log_start))
    return ranges


def readable(pieces: list[OffsetRange],
             earliest: Mapping[TopicPartitionKey, int]) -> list[OffsetRange]:
    """Each planned piece cut to what the log still holds, in place: a piece wholly deleted, or of
    a partition gone, stays as an empty task, so no other piece moves to another task index."""
    out: list[OffsetRange] = []
    for p in pieces:
        low = earliest.get((p.topic, p.partition))
        begin = p.end if low is None else min(max(p.start, low), p.end)
        out.append(dataclasses.replace(p, start=begin))
    return out


def split_ranges(ranges: list[OffsetRange], *, min_partitions: Optional[int] = None,
                 max_records_per_partition: Optional[int] = None) -> list[OffsetRange]:
    """More, smaller tasks: each piece at most ``max_records_per_partition`` offsets, and about
    ``min_partitions`` pieces in total, the biggest ranges split first. Pieces of one range differ
    in size by at most one offset and keep the partition's offset order; only the first keeps
    ``earliest_start`` (the others start at offsets the planning chose, like Spark's)."""
    ranges = [r for r in ranges if r.size > 0]
    parts = {i: 1 for i in range(len(ranges))}
    if max_records_per_partition:
        for i, r in enumerate(ranges):
            parts[i] = max(1, math.ceil(r.size / max_records_per_partition))
    if min_partitions and sum(parts.values()) < min_partitions:
        # Give the next piece to the range whose pieces are currently the biggest.
        heap = [(-(r.size / parts[i]), i) for i, r in enumerate(ranges) if r.size > parts[i]]
        heapq.heapify(heap)
        total = sum(parts.values())
        while total < min_partitions and heap:
            _, i = heapq.heappop(heap)
            parts[i] += 1
            total += 1
            if ranges[i].size > parts[i]:
                heapq.heappush(heap, (-(ranges[i].size / parts[i]), i))
    out: list[OffsetRange] = []
    for i, r in enumerate(ranges):
        n = parts[i]
        base, extra = divmod(r.size, n)
        pos = r.start
        for k in range(n):
            step = base + (1 if k < extra else 0)
            if step > 0:
                out.append(dataclasses.replace(r, start=pos, end=pos + step,
                                               earliest_start=r.earliest_start and k == 0))
            pos += step
    return out
