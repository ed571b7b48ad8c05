"""Spark adapters of the reader: schema, batch reader, and micro-batch stream.

Thin by design (like Spark's KafkaScan/KafkaMicroBatchStream over KafkaOffsetReader): options are
parsed once into ``SourceOptions``; discovery and offset look-ups are ``KafkaOffsetReader``'s,
admission control and range planning ``range_planner``'s, executor reads ``range_reader``'s.

Facts of the Python Data Source API this module is built on (pyspark 4.3):
- The stream reader answering initialOffset/latestOffset/partitions/commit lives in one long-lived
  driver-side process; ``read()`` runs on executors against a pickled copy. So everything ``read()``
  needs travels in the InputPartition (a ``FetchTask``), and the reader drops live clients when
  pickled.
- Offsets are stored verbatim as JSON and compared as strings: always built by ``to_offset_json``.
- The start of batch 0 (``initialOffset()``) is never written to the checkpoint, and a restart that
  replays batch 0 calls ``initialOffset()`` again. Spark's own Kafka source keeps its resolved
  starting offsets in a file of its own for this; a Python reader has no checkpoint path. So the
  initial offset here is a marker, resolved once, when batch 0's end is chosen; that end, which
  Spark logs in ``offsets/0`` and hands back on replay, carries the resolved start with it
  (``batch_start_of``). Batch 0 reads data at once, and a replay reads exactly the same ranges
  whatever "earliest", "latest" or a timestamp would resolve to by then.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from txkafka.connector.source.range_reader import FetchTask, fetch_range
from txkafka.connector.source.group_offsets import ConsumerGroupCommitter
from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.fault_injection import FaultInjector
from txkafka.connector.client.config import check_client_config
from txkafka.connector.source.offset_reader import KafkaOffsetReader
from txkafka.connector.source.offsets import (
    PartitionOffsets,
    batch_start_of,
    from_offset_json,
    to_offset_json,
)
from txkafka.connector.source.range_planner import (
    AdmissionControl,
    OffsetRange,
    plan_ranges,
    readable,
    split_ranges,
)
from txkafka.connector.source.options import (
    LatestOffsets,
    SourceOptions,
    SpecificOffsets,
    TopicPartitionKey,
    parse_bool,
    parse_source_options,
    validate_common,
)

from .formats import decode_plan, spark_schema
from .spark_worker import frozen_after, tune_worker_socket

if TYPE_CHECKING:
    from txkafka.connector.checkpoint.savepoint import StartingOffsets
    from txkafka.connector.serde.batches import DecodePlan

log = logging.getLogger("txkafka.reader")

# The start of batch 0. ':' cannot occur in a Kafka topic name, so this never collides with an offset,
# and it is never written to the checkpoint (Spark logs end offsets only).
INITIAL_OFFSET: dict[str, dict[str, int]] = {"txkafka:initial": {}}

_HEADERS = ArrayType(StructType([StructField("key", StringType()),
                                 StructField("value", BinaryType())]))


def _schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", _HEADERS))
    return StructType(fields)


def source_schema(options: Mapping[str, Any]) -> StructType:
    """Spark's Kafka schema (+ ``headers`` with includeHeaders; key and value typed by their
    formats' reader schemas). Validates the common options, so a bad option fails at ``load()``."""
    opts = validate_common(options)
    include_headers = parse_bool(opts, "includeheaders", False)
    plan = decode_plan(parse_source_options(options, streaming=None))
    return spark_schema(_schema(include_headers), include_headers, plan)


def _check_schema(schema: StructType, include_headers: bool,
                  plan: Optional[DecodePlan] = None) -> None:
    expected = spark_schema(_schema(include_headers), include_headers, plan)
    if schema is not None and ([(f.name, f.dataType) for f in schema.fields]
                               != [(f.name, f.dataType) for f in expected.fields]):
        formats = ("; with keyFormat/valueFormat the schema is the registry's when the query "
                   "starts: a version registered since load() changes it, so load() again"
                   if plan is not None else "")
        raise KafkaConfigError(
            "the txkafka source has a fixed schema and cannot take a user-specified one "
            f"(got {schema.simpleString()}, the source gives {expected.simpleString()}){formats}")


def _is_initial(offset: Optional[Mapping[str, Any]]) -> bool:
    return bool(offset) and "txkafka:initial" in offset  # type: ignore[operator]


class KafkaInputPartition(InputPartition):
    """One offset range of one Kafka partition; ``value`` is the picklable ``FetchTask``."""

    def __init__(self, task: FetchTask) -> None:
        super().__init__(task)

    @property
    def task(self) -> FetchTask:
        return self.value


def _input_partitions(options: SourceOptions, ranges: list[OffsetRange],
                      earliest: Mapping[TopicPartitionKey, int],
                      decode: Optional[DecodePlan] = None) -> list[KafkaInputPartition]:
    """Tasks from the batch's offsets and options alone (split first), then each cut to what the
    log holds: a replay of the batch gives every task the same index (range_planner.plan_ranges)."""
    ranges = readable(split_ranges(ranges, min_partitions=options.min_partitions,
                                   max_records_per_partition=options.max_records_per_partition),
                      earliest)
    conf = tuple(sorted(options.consumer_config().items()))
    return [KafkaInputPartition(FetchTask(
        topic=r.topic, partition=r.partition, start=r.start, end=r.end, consumer_config=conf,
        poll_timeout_ms=options.poll_timeout_ms, fail_on_data_loss=options.fail_on_data_loss,
        include_headers=options.include_headers, fetcher=options.fetcher,
        earliest_start=r.earliest_start, decode=decode)) for r in ranges]


def _read(partition: Optional[InputPartition]) -> Iterator[Any]:
    task = getattr(partition, "value", None)
    if not isinstance(task, FetchTask):
        # An empty plan: Spark still runs one task, with a partition of its own (value None).
        return iter(())
    tune_worker_socket()
    _faults_at_read(task)
    return frozen_after(fetch_range(task), "read")


def _faults_at_read(task: FetchTask) -> None:
    """The ``read_partition`` fault-injection point (TXKAFKA_FAULT_INJECTION; inert unless armed)."""
    faults = FaultInjector.get()
    if faults.armed:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        raw = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        faults.check("read_partition", batch=int(raw) if raw is not None else None,
                     partition=task.partition)


def _starting_offsets(reader: KafkaOffsetReader, options: SourceOptions,
                      tps: list[TopicPartitionKey], latest: Optional[PartitionOffsets] = None
                      ) -> StartingOffsets:
    """Where a new query or a batch read starts (startingOffsets, or option savepoint), and which
    partitions start at "earliest"."""
    # Imported here: only a new query's first trigger or a batch read needs it, not every start.
    from txkafka.connector.checkpoint.savepoint import starting_offsets

    return starting_offsets(reader, options, tps, latest=latest)


def _moved_or_new(start: Mapping[TopicPartitionKey, int],
                  end: Mapping[TopicPartitionKey, int]) -> list[TopicPartitionKey]:
    """The partitions whose log starts plan_ranges needs: those with records to read, and those
    whose offsets went backwards (their report names what is skipped)."""
    return sorted(tp for tp, off in end.items() if tp not in start or off != start[tp])


class _ClientHolder:
    """Lazily created driver-side clients, dropped when pickled (executors never need them)."""

    options: SourceOptions
    _offset_reader: Optional[KafkaOffsetReader] = None

    @property
    def offset_reader(self) -> KafkaOffsetReader:
        if self._offset_reader is None:
            reader = KafkaOffsetReader(self.options)
            # First use on this driver: the query's start or restart. A missing ACL fails here,
            # named, instead of reading nothing or timing out in the tasks.
            reader.check_access()
            self._offset_reader = reader
        return self._offset_reader

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for k in list(state):
            if k in ("_offset_reader", "_committer"):
                state[k] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


def _ends_before_start(opts: SourceOptions, tp: TopicPartitionKey, start: int, end: int) -> str:
    where = f"topic {tp[0]!r} partition {tp[1]}"
    if not isinstance(opts.ending, LatestOffsets):
        return (f"{where}: the ending offset {end} is before the starting offset {start}; check "
                "endingOffsets/endingTimestamp against startingOffsets/startingTimestamp")
    committed = opts.consumer_config().get("isolation.level", "read_committed") == "read_committed"
    held = (" (read_committed reads up to the last stable offset: an open transaction holds it "
            "back)" if committed else "")
    return (f"{where}: the starting offset {start} is past the latest offset {end}{held}; "
            "check startingOffsets/startingTimestamp")


class KafkaBatchReader(_ClientHolder, DataSourceReader):
    """``spark.read.format("txkafka")``: [startingOffsets, endingOffsets) of every partition."""

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self.options = parse_source_options(options, streaming=False)
        self.decode = decode_plan(self.options)
        _check_schema(schema, self.options.include_headers, self.decode)
        # Again here: with a user-given schema Spark never calls schema() (validate_common).
        check_client_config(self.options.consumer_config(), "consumer")
        self._offset_reader = None

    def partitions(self) -> Sequence[InputPartition]:
        opts, reader = self.options, self.offset_reader
        try:
            reader.check_assignment()
            tps = reader.topic_partitions()
            start, at_log_start = _starting_offsets(reader, opts, tps)
            end = reader.resolve(opts.ending, tps, starting=False)
            for tp in sorted(start):
                if tp in end and end[tp] < start[tp]:
                    raise KafkaConfigError(_ends_before_start(opts, tp, start[tp], end[tp]))
            end = {tp: off for tp, off in end.items() if tp in start}
            earliest = reader.log_starts(_moved_or_new(start, end), start)
            ranges = plan_ranges(start, end, earliest=earliest,
                                 fail_on_data_loss=opts.fail_on_data_loss,
                                 at_log_start=at_log_start)
        finally:
            reader.close()
            self._offset_reader = None
        parts = _input_partitions(opts, ranges, earliest, self.decode)
        log.info("txkafka batch read: %d task(s) over %d partition(s)", len(parts), len(tps))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)


class KafkaMicroBatchStream(_ClientHolder, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("txkafka")``: offsets in Spark's checkpoint, admission control,
    Trigger.AvailableNow, new partitions and topics picked up every trigger."""

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self.options = parse_source_options(options, streaming=True)
        self.decode = decode_plan(self.options)
        _check_schema(schema, self.options.include_headers, self.decode)
        # Again here: with a user-given schema Spark never calls schema() (validate_common).
        check_client_config(self.options.consumer_config(), "consumer")
        self._offset_reader = None
        self._committer: Optional[ConsumerGroupCommitter] = None
        self._admission = AdmissionControl(self.options.max_offsets_per_trigger,
                                           self.options.min_offsets_per_trigger,
                                           self.options.max_trigger_delay_ms)
        self._available_now_target: Optional[PartitionOffsets] = None
        self._latest: Optional[PartitionOffsets] = None

    # ---- offsets and admission control -----------------------------------------------------

    def initialOffset(self) -> dict:
        return dict(INITIAL_OFFSET)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target now: the query stops at the latest offsets of the partitions present."""
        reader = self.offset_reader
        self._available_now_target = reader.latest_offsets(reader.topic_partitions())
        log.info("Trigger.AvailableNow target: %s", to_offset_json(self._available_now_target))

    def _limits(self, limit: ReadLimit) -> tuple[Optional[int], Optional[int]]:
        """(max rows, min rows) for this call: Spark's limit wins; AvailableNow never waits."""
        opts = self.options
        waits = self._available_now_target is None
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows, (opts.min_offsets_per_trigger if waits else None)
        if isinstance(limit, ReadMinRows):
            return opts.max_offsets_per_trigger, (limit.min_rows if waits else None)
        return None, None

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        reader = self.offset_reader
        first = _is_initial(start)
        if first:
            start_map = self._resolve_starting_offsets()
            carried: Optional[PartitionOffsets] = start_map
        else:
            start_map = from_offset_json(start)
            carried = batch_start_of(start)  # batch 0 ended at ``start`` and read nothing new since
            # Spark asks for the next batch only after committing the one ending at ``start`` (its
            # commit log is written first), so ``start`` is committed: publishing it here also
            # covers the last batch, for which commit() is never called.
            self._commit_to_group(start_map)
        latest = self._latest_offsets(start_map)
        self._latest = latest
        new = [tp for tp in latest if tp not in start_map]
        max_rows, min_rows = self._limits(limit)
        earliest_new = reader.earliest_offsets(new) if new and (max_rows or min_rows) else {}
        end = self._admission.end_offsets(start_map, latest, earliest_new,
                                          max_rows=max_rows, min_rows=min_rows)
        if end is None and first:
            # Waiting for minOffsetsPerTrigger: batch 0 still runs, empty, so that the start is
            # logged now (resolved again later, "latest" would skip what arrives meanwhile).
            self._admission.mark_trigger()
            end = start_map
        if end is None or end == start_map:
            return to_offset_json(start_map, batch_start=carried)  # the same text: no new batch
        return to_offset_json(end, batch_start=start_map if first else None)

    def _start_is_replayable(self) -> bool:
        """Does resolving startingOffsets again give the same offsets? Only explicit offsets do
        ("earliest" moves with retention, "latest" and timestamps with new records)."""
        spec = self.options.starting
        return isinstance(spec, SpecificOffsets) and all(off >= 0 for _, off in spec.offsets)

    def _batch_0_start(self, end: dict) -> Optional[PartitionOffsets]:
        """Batch 0's start: carried in its logged end. A checkpoint from an older txkafka has none:
        its batch 0 read data only from explicit offsets (they resolve the same again) and was an
        empty batch pinning the start otherwise (None: read nothing)."""
        carried = batch_start_of(end)
        if carried is not None:
            return carried
        if not self._start_is_replayable():
            self._refuse_other_sources_batch_0(end)
            return None
        spec = self.options.starting
        return self.offset_reader.resolve(spec, sorted(spec.as_dict()), starting=True)

    def _refuse_other_sources_batch_0(self, end: dict) -> None:
        """An older txkafka's batch 0 without a carried start read nothing: its end is where the
        start resolved then, and the same start resolves at or after it now (earliest, latest and
        timestamps only move forward). An end past today's start was logged by another source,
        Spark's format("kafka") stopped in its first batch: reading nothing would skip its
        records, reading from today's start could repeat or skip others."""
        end_map = from_offset_json(end)
        reader = self.offset_reader
        now = _starting_offsets(reader, self.options, sorted(end_map)).offsets
        ahead = sorted(tp for tp, off in end_map.items() if tp in now and now[tp] < off)
        if not ahead:
            return
        raise KafkaConfigError(
            f"Spark replays batch 0 of this checkpoint, and its offsets/0 ends at "
            f"{to_offset_json(end_map)} without the start txkafka logs with its own first batch: "
            f"another source wrote it (Spark's format('kafka') stopped before its first batch "
            f"finished), and txkafka cannot tell where that batch started. startingOffsets "
            f"resolves to {to_offset_json({tp: now[tp] for tp in ahead})} now, before that end: "
            f"reading nothing would skip the batch's records, reading from there could repeat "
            f"some. Nothing was read. Set startingOffsets to the JSON offsets that source started "
            f"from (Spark's built-in source keeps them in <checkpointLocation>/sources/0/0, the "
            f"line after 'v1') and restart, or first let the query finish its first batch on "
            f"format('kafka'); docs/switching.md.")

    def _resolve_starting_offsets(self) -> PartitionOffsets:
        """startingOffsets (or a timestamp, or a savepoint) -> offsets; "latest" under
        AvailableNow is its target. Only a new query gets here: the result is batch 0's start,
        carried in offsets/0, so neither a restart nor a replay of batch 0 reads the savepoint."""
        reader = self.offset_reader
        reader.check_assignment()
        starting = _starting_offsets(reader, self.options, reader.topic_partitions(),
                                     latest=self._available_now_target).offsets
        log.info("txkafka starting offsets: %s", to_offset_json(starting))
        return starting

    def _latest_offsets(self, start: PartitionOffsets) -> PartitionOffsets:
        """Latest offsets of the partitions to read, never moving a partition backwards unless its
        log really went backwards (so a start past the LSO waits for the open transaction), and
        never without a partition of ``start`` that only one metadata answer lacked."""
        reader = self.offset_reader
        if self._available_now_target is not None:
            latest = dict(self._available_now_target)
            unknown = [tp for tp in start if tp not in latest]
            if unknown:
                present = set(reader.confirmed_partitions(unknown))
                for tp in unknown:
                    if tp in present:
                        latest[tp] = start[tp]  # found after the target was fixed: no progress
                # (the others were deleted: left out, so partitions() reports the loss)
        else:
            tps = reader.confirmed_partitions(start)
            latest = reader.latest_offsets(tps)
            present = set(tps)
            for tp, off in start.items():
                if tp in present and tp not in latest:
                    latest[tp] = off  # look-up failed but the partition exists: no progress now
        behind = sorted(tp for tp, off in latest.items() if tp in start and off < start[tp])
        if behind:
            high = reader.high_watermarks(behind)
            for tp in behind:
                if tp in high and high[tp] >= start[tp]:
                    latest[tp] = start[tp]
        return latest

    def reportLatestOffset(self) -> Optional[dict]:
        return to_offset_json(self._latest) if self._latest else None

    # ---- planning and reading --------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start == end:
            return []
        end_map = from_offset_json(end)
        if _is_initial(start):
            replayed = self._batch_0_start(end)
            if replayed is None:
                return []
            # (all of it: a partition deleted before the end was chosen is plan_ranges' to report)
            start_map = replayed
        else:
            start_map = from_offset_json(start)
        if start_map == end_map:
            # Nothing to read: in practice batch 0 from "latest" or an empty topic, since Spark
            # plans no later batch whose end equals its start.
            return []
        earliest = self.offset_reader.log_starts(_moved_or_new(start_map, end_map), start_map)
        ranges = plan_ranges(start_map, end_map, earliest=earliest,
                             fail_on_data_loss=self.options.fail_on_data_loss)
        return _input_partitions(self.options, ranges, earliest, self.decode)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)

    def commit(self, end: dict) -> None:
        """Spark committed the batch ending at ``end``: publish it to the consumer group if asked
        (monitoring only; recovery always uses the checkpoint)."""
        if not _is_initial(end):
            self._commit_to_group(from_offset_json(end))

    def _commit_to_group(self, offsets: PartitionOffsets) -> None:
        if not self.options.commit_offsets_to_group or not offsets:
            return
        if self._committer is None:
            self._committer = ConsumerGroupCommitter(self.options,
                                                     lambda: self.offset_reader._admin())
        if self._committer.last_committed != offsets:
            self._committer.commit(offsets)

    def stop(self) -> None:
        if self._offset_reader is not None:
            self._offset_reader.close()
        self._offset_reader = None
        self._committer = None
