"""Savepoints: the source positions that match what an exactly-once sink's output holds.

A savepoint lets a changed query (a new plan, another number of tasks, a new checkpoint) continue
where a stopped one left off, exactly once: the old query's output holds exactly the records of
its batches up to the newest one whose output is committed, and the new query starts right after
them. ``txkafka savepoint create`` (txkafka/savepoint.py) resolves the sink and writes the file;
the reader option ``savepoint`` starts a new query from it.

The file is small, human-readable JSON::

    {"format": "txkafka-savepoint", "version": 1, "created": "...", "txkafka_version": "...",
     "origin": {"checkpoint": ..., "query_id": ..., "sink_id": ..., "batch_id": 7, "basis": ...},
     "positions": {"orders": {"0": 120, "1": 98}},       merged per topic where sources agree
     "conflicts": {"t": {"0": {"0": 5}, "1": {"0": 9}}}, topic -> source index -> offsets
     "sources": [{"index": 0, "kind": "kafka", "positions": {...}}, ...],
     "resolved": {...}, "notes": [...]}

Offsets are Spark's Kafka shape (next offset to read). This module never imports pyspark: the
reader's adapter and the command line both use it.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple, Optional

import pyarrow.fs as pafs

from ..errors import KafkaConfigError, SavepointError, TxKafkaError
from ..formats import SAVEPOINT, check_record
from ..source.offsets import (
    BATCH_START_KEY,
    PartitionOffsets,
    describe_offsets,
    from_offset_json,
    to_offset_json,
)
from ..secrets_redaction import redact_uri
from ..source.options import (
    Assign,
    ConsumerStrategy,
    EarliestOffsets,
    PartitionTimestamps,
    SourceOptions,
    SpecificOffsets,
    Subscribe,
    SubscribePattern,
    TopicPartitionKey,
    at_log_start,
)
from .spark_checkpoint import OffsetLogEntry, checkpoint_filesystem

if TYPE_CHECKING:
    from ..source.offset_reader import KafkaOffsetReader
    from .object_store import S3Settings

log = logging.getLogger("txkafka.reader")

FORMAT = "txkafka-savepoint"

# Where the positions come from (``origin.basis``).
BASIS_SPARK = "spark-commit"      # Spark's commits/N: batch N is done
BASIS_SINK = "sink-commit"        # the sink committed batch N; Spark had not recorded it yet
BASIS_BATCH_0 = "batch-0-start"   # nothing committed: where batch 0 started (the old start)
BASIS_NONE = "none"               # nothing logged at all: no positions

KIND_KAFKA = "kafka"
KIND_OTHER = "other"


@dataclass(frozen=True)
class SourcePosition:
    """One source of the old query, in Spark's source order (its line in ``offsets/N``)."""

    index: int
    kind: str                                   # KIND_KAFKA or KIND_OTHER
    positions: PartitionOffsets = field(default_factory=dict)
    raw: Optional[str] = None                   # KIND_OTHER: the offset Spark logged, verbatim

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "kind": self.kind}
        if self.kind == KIND_KAFKA:
            out["positions"] = to_offset_json(self.positions)
        else:
            out["offset"] = self.raw
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SourcePosition":
        kind = str(data["kind"])
        if kind == KIND_KAFKA:
            return cls(int(data["index"]), kind, from_offset_json(data.get("positions") or {}))
        return cls(int(data["index"]), kind, {}, None if data.get("offset") is None
                   else str(data["offset"]))


@dataclass(frozen=True)
class Savepoint:
    positions: PartitionOffsets                          # merged per topic
    conflicts: dict[str, dict[int, PartitionOffsets]]    # topic -> source index -> its offsets
    sources: tuple[SourcePosition, ...]
    origin: dict[str, Any]
    created_ms: int
    txkafka_version: str
    resolved: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    version: int = SAVEPOINT.current

    @property
    def batch_id(self) -> Optional[int]:
        b = self.origin.get("batch_id")
        return None if b is None else int(b)

    @property
    def basis(self) -> str:
        return str(self.origin.get("basis", BASIS_NONE))

    def topics(self) -> list[str]:
        """Every topic the savepoint has a position for (merged or conflicting)."""
        return sorted({t for t, _ in self.positions} | set(self.conflicts))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": self.version,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created_ms / 1000)),
            "created_ms": self.created_ms,
            "txkafka_version": self.txkafka_version,
            "origin": dict(self.origin),
            "positions": to_offset_json(self.positions),
            "conflicts": {t: {str(i): to_offset_json(offs) for i, offs in sorted(by.items())}
                          for t, by in sorted(self.conflicts.items())},
            "sources": [s.to_json() for s in self.sources],
            "resolved": dict(self.resolved),
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> "Savepoint":
        """Parse a savepoint file's JSON; ``where`` names the file in errors."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise SavepointError(f"{where} is not a txkafka savepoint (no \"format\": \"{FORMAT}\"); "
                                 "create one with `txkafka savepoint create`")
        if "version" not in data:
            raise SavepointError(
                f"{where} is a damaged txkafka savepoint: it has no format version")
        version = check_record(SAVEPOINT, data, where, damaged=SavepointError)
        try:
            conflicts = {str(t): {int(i): from_offset_json(offs) for i, offs in by.items()}
                         for t, by in (data.get("conflicts") or {}).items()}
            return cls(
                positions=from_offset_json(data.get("positions") or {}),
                conflicts=conflicts,
                sources=tuple(SourcePosition.from_json(s) for s in data.get("sources") or []),
                origin=dict(data.get("origin") or {}),
                created_ms=int(data.get("created_ms", 0)),
                txkafka_version=str(data.get("txkafka_version", "")),
                resolved=dict(data.get("resolved") or {}),
                notes=tuple(str(n) for n in data.get("notes") or []),
                version=version,
            )
        except (KeyError, TypeError, ValueError, AttributeError, KafkaConfigError) as e:
            raise SavepointError(f"{where} is a damaged txkafka savepoint: {e}") from None

    def text(self, location: str) -> str:
        """What ``txkafka savepoint show`` prints."""
        o = self.origin
        lines = [f"savepoint {redact_uri(location)} (format {self.version}, created "
                 f"{self.to_json()['created']} by txkafka {self.txkafka_version})",
                 f"  from query {o.get('query_id')} on checkpoint {o.get('checkpoint')}, sink "
                 f"{o.get('sink_id')} (transactional ids {o.get('sink_prefix')}*)",
                 f"  position: {describe_basis(self.basis, self.batch_id)}"]
        if self.positions:
            lines.append("  positions (where a query with .option(\"savepoint\", ...) starts):")
            by_topic: dict[str, list[str]] = {}
            for (t, p), off in sorted(self.positions.items()):
                by_topic.setdefault(t, []).append(f"{p}:{off}")
            lines += [f"    {t}  {' '.join(ps)}" for t, ps in by_topic.items()]
        else:
            lines.append("  positions: none (every partition starts where startingOffsets says)")
        for t, by in sorted(self.conflicts.items()):
            per = "; ".join(f"source #{i}: {describe_offsets(offs)}" for i, offs in sorted(by.items()))
            lines.append(f"    {t}  read at different positions by several sources ({per}): "
                         "a reader of it needs savepointSource")
        if len(self.sources) > 1 or any(s.kind != KIND_KAFKA for s in self.sources):
            lines.append("  sources of the old query (savepointSource picks one):")
            for s in self.sources:
                if s.kind == KIND_KAFKA:
                    topics = sorted({t for t, _ in s.positions})
                    lines.append(f"    #{s.index} kafka: {', '.join(topics) or 'no position'}")
                else:
                    lines.append(f"    #{s.index} not Kafka (not restored): {s.raw}")
        if self.resolved:
            lines.append("  resolved before the savepoint: " + ", ".join(
                f"{k}={v}" for k, v in sorted(self.resolved.items())))
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def describe_basis(basis: str, batch_id: Optional[int]) -> str:
    if basis == BASIS_SPARK:
        return f"end of batch {batch_id} (committed by the sink and by Spark)"
    if basis == BASIS_SINK:
        return (f"end of batch {batch_id} (committed by the sink; Spark had not recorded it: its "
                "output is in the sink's topics all the same)")
    if basis == BASIS_BATCH_0:
        return "start of batch 0 (the old query committed no batch: its start, as it resolved it)"
    return "none (the old query logged no batch)"


# ---------------------------------------------------------------------- from the checkpoint

def kafka_offsets(line: str, entry: Optional[OffsetLogEntry] = None) -> Optional[dict[str, Any]]:
    """A source's logged offset parsed, if it has Spark's Kafka shape ``{"t": {"p": n}}``
    (``entry``: the ``offsets/N`` it is a line of, named if its format is newer than this
    txkafka reads)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    topics = {k: v for k, v in data.items() if not str(k).startswith("txkafka:")}
    if not all(isinstance(v, dict) for v in topics.values()):
        return None
    if not topics and BATCH_START_KEY not in data:
        return None
    where = {"file": entry.path, "checkpoint": entry.checkpoint} if entry and entry.path else {}
    try:
        from_offset_json(data, **where)
        if BATCH_START_KEY in data:
            from_offset_json(data[BATCH_START_KEY])
    except (KafkaConfigError, TypeError, AttributeError):
        return None
    return data


def resume_option(logged: str) -> str:
    """The ``startingOffsets`` value that continues after a batch whose end Spark logged as
    ``logged`` (one source line of ``offsets/N``): that end without batch 0's start. A line that
    is not a txkafka/Kafka offset comes back unchanged."""
    try:
        data = json.loads(logged)
    except ValueError:
        return logged
    if not isinstance(data, dict):
        return logged
    return json.dumps({k: v for k, v in data.items() if k != BATCH_START_KEY},
                      separators=(",", ":"))


def has_kafka_source(entry: OffsetLogEntry) -> bool:
    return any(kafka_offsets(line, entry) is not None for line in entry.sources)


def sources_of(entry: OffsetLogEntry, *, batch_start: bool) -> tuple[list[SourcePosition], list[str]]:
    """Each source's position: batch N's end offsets, or (``batch_start``) batch 0's resolved start.

    Returns the sources and notes for the operator (sources that cannot be restored)."""
    out: list[SourcePosition] = []
    notes: list[str] = []
    for i, line in enumerate(entry.sources):
        data = kafka_offsets(line, entry)
        if data is None:
            out.append(SourcePosition(i, KIND_OTHER, {}, line))
            notes.append(f"source #{i} is not a Kafka source (its offset is {line!r}); a new query "
                         "starts it where its own options say")
            continue
        if not batch_start:
            out.append(SourcePosition(i, KIND_KAFKA, from_offset_json(data)))
            continue
        start = data.get(BATCH_START_KEY)
        if isinstance(start, Mapping):
            out.append(SourcePosition(i, KIND_KAFKA, from_offset_json(start)))
        else:
            out.append(SourcePosition(i, KIND_KAFKA, {}))
            notes.append(f"source #{i}: batch 0 carries no resolved start (Spark's built-in Kafka "
                         "source, or an older txkafka): a new query starts it where its "
                         "startingOffsets says")
    return out, notes


def merge_sources(sources: Iterable[SourcePosition]
                  ) -> tuple[PartitionOffsets, dict[str, dict[int, PartitionOffsets]]]:
    """Positions per topic across sources; a topic that two sources read at different offsets
    of one partition is a conflict (a self-union or self-join), kept per source."""
    per_topic: dict[str, dict[int, PartitionOffsets]] = {}
    for s in sources:
        if s.kind != KIND_KAFKA:
            continue
        for (t, p), off in s.positions.items():
            per_topic.setdefault(t, {}).setdefault(s.index, {})[(t, p)] = off
    merged: PartitionOffsets = {}
    conflicts: dict[str, dict[int, PartitionOffsets]] = {}
    for t, by in per_topic.items():
        union: PartitionOffsets = {}
        clash = False
        for offs in by.values():
            for tp, off in offs.items():
                if union.get(tp, off) != off:
                    clash = True
                union[tp] = off
        if clash:
            conflicts[t] = by
        else:
            merged.update(union)
    return merged, conflicts


def committed_batch(spark_committed: Optional[int], sink_complete: Optional[int]
                    ) -> tuple[Optional[int], str]:
    """The newest batch whose output is committed, and on whose word: Spark's ``commits/`` or the
    sink's log (the sink commits before Spark records the batch, so it may be one ahead)."""
    known = [b for b in (spark_committed, sink_complete) if b is not None]
    if not known:
        return None, BASIS_NONE
    batch = max(known)
    if spark_committed is not None and spark_committed >= batch:
        return batch, BASIS_SPARK
    return batch, BASIS_SINK


# --------------------------------------------------------------------------------- the file

def write_savepoint(sp: Savepoint, location: str, s3: "S3Settings | None" = None) -> str:
    """Write ``sp`` to ``location`` (a path or a pyarrow.fs URI) atomically, never overwriting an
    existing file. Returns the path on its filesystem. ``s3``: as ``checkpoint_filesystem``."""
    fs, path = checkpoint_filesystem(location, error=SavepointError, name="--out", s3=s3)
    shown = redact_uri(location)
    data = (json.dumps(sp.to_json(), indent=1, sort_keys=False) + "\n").encode()
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    try:
        if _exists(fs, path):
            raise SavepointError(f"--out {shown} exists already; a savepoint is never overwritten: "
                                 "give another path (or move the old file away)")
        if parent:
            fs.create_dir(parent, recursive=True)
        if isinstance(fs, pafs.LocalFileSystem):
            _create_local(path, data, shown)
        elif fs.type_name in ("s3", "gcs"):
            # One whole-object PUT: readers see all of it or nothing. The existence check above
            # and this write are two steps here (no create-if-absent in pyarrow).
            with fs.open_output_stream(path) as out:
                out.write(data)
        else:
            tmp = f"{parent}/.{path.rsplit('/', 1)[-1]}.{uuid.uuid4().hex}.tmp"
            with fs.open_output_stream(tmp) as out:
                out.write(data)
            if _exists(fs, path):
                fs.delete_file(tmp)
                raise SavepointError(f"--out {shown} was created meanwhile; not overwritten")
            fs.move(tmp, path)
    except TxKafkaError:
        raise
    except OSError as e:
        raise SavepointError(f"cannot write the savepoint to {shown}: {e}") from None
    return path


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def _create_local(path: str, data: bytes, shown: str) -> None:
    """Write to a temporary file, then link it into place: ``link`` fails if the name exists, so
    the file appears complete and never replaces another."""
    parent = os.path.dirname(path) or "."
    tmp = os.path.join(parent, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise SavepointError(f"--out {shown} was created meanwhile; not overwritten") from None
    finally:
        os.unlink(tmp)
    fd = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)  # the new name lives in the directory
    finally:
        os.close(fd)


def read_savepoint(location: str, *, error: type[Exception] = SavepointError,
                   name: str = "savepoint", s3: "S3Settings | None" = None) -> Savepoint:
    """Read and parse a savepoint file; problems raise ``error`` naming ``name`` and the file.
    ``s3``: as ``checkpoint_filesystem``."""
    shown = redact_uri(location)
    fs, path = checkpoint_filesystem(location, error=error, name=name, s3=s3)
    try:
        with fs.open_input_stream(path) as f:
            raw = f.read()
    except (FileNotFoundError, OSError) as e:
        missing = isinstance(e, FileNotFoundError) or "not found" in str(e).lower() or \
            "no such file" in str(e).lower()
        why = "does not exist" if missing else f"cannot be read: {e}"
        raise error(f"{name} {shown!r} {why}") from None
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise error(f"{name} {shown!r} is not a txkafka savepoint (not JSON: {e})") from None
    try:
        return Savepoint.from_json(data, f"{name} {shown!r}")
    except SavepointError as e:
        raise error(str(e)) from None


# ------------------------------------------------------------------------- the reader option

def reads_topic(strategy: ConsumerStrategy, topic: str) -> bool:
    if isinstance(strategy, Subscribe):
        return topic in strategy.topics
    if isinstance(strategy, SubscribePattern):
        return strategy.matches(topic)
    assert isinstance(strategy, Assign)
    return any(t == topic for t, _ in strategy.partitions)


def describe_strategy(strategy: ConsumerStrategy) -> str:
    if isinstance(strategy, Subscribe):
        return f"subscribe={','.join(strategy.topics)}"
    if isinstance(strategy, SubscribePattern):
        return f"subscribePattern={strategy.pattern}"
    assert isinstance(strategy, Assign)
    return "assign=" + json.dumps({t: sorted(p for tt, p in strategy.partitions if tt == t)
                                   for t in sorted({t for t, _ in strategy.partitions})})


def savepoint_start(sp: Savepoint, options: SourceOptions, tps: Iterable[TopicPartitionKey],
                    ) -> tuple[PartitionOffsets, list[str]]:
    """The savepoint's offsets for the partitions this reader reads (``tps``), and warnings.

    Raises KafkaConfigError when the savepoint has positions but none for a topic the reader
    reads, when a topic it reads was read at different positions by several old sources and
    ``savepointSource`` does not pick one, or when ``savepointSource`` is not a Kafka source.
    """
    where = f"option 'savepoint' ({redact_uri(options.savepoint or '')!r})"
    if options.savepoint_source is not None:
        i = options.savepoint_source
        chosen = [s for s in sp.sources if s.index == i]
        if not chosen or chosen[0].kind != KIND_KAFKA:
            kinds = ", ".join(f"#{s.index} {s.kind}" for s in sp.sources) or "none"
            raise KafkaConfigError(
                f"option 'savepointSource' is {i}, but source #{i} of the savepoint's query is "
                f"{'not a Kafka source' if chosen else 'not there'} (its sources: {kinds}; "
                "`txkafka savepoint show` lists them)")
        positions, conflicts = dict(chosen[0].positions), {}
    else:
        positions, conflicts = dict(sp.positions), dict(sp.conflicts)
    topics = sorted({t for t, _ in positions} | set(conflicts))
    if not topics:
        return {}, [f"{where} holds no position ({describe_basis(sp.basis, sp.batch_id)}): every "
                    "partition starts where startingOffsets says"]
    read = [t for t in topics if reads_topic(options.strategy, t)]
    if not read:
        raise KafkaConfigError(
            f"{where} has positions for topics {', '.join(topics)}, none of which this source "
            f"reads ({describe_strategy(options.strategy)}). A savepoint starts a query that "
            "reads the same topics as the one it was taken from: check the path and the topics")
    clash = [t for t in read if t in conflicts]
    if clash:
        t = clash[0]
        per = "; ".join(f"source #{i} at {describe_offsets(offs)}"
                        for i, offs in sorted(conflicts[t].items()))
        raise KafkaConfigError(
            f"{where}: topic {t!r} was read by several sources of the old query at different "
            f"positions ({per}). Set option 'savepointSource' on each source to the index of the "
            "old source it continues (`txkafka savepoint show` lists them)")
    wanted = set(tps)
    start = {tp: off for tp, off in positions.items() if tp in wanted}
    warnings = []
    gone = sorted(tp for tp in positions if tp not in wanted and tp[0] in read
                  and not isinstance(options.strategy, Assign))
    if gone:
        warnings.append(f"{where}: partitions {describe_offsets({tp: positions[tp] for tp in gone})} "
                        "do not exist any more; their positions are not used")
    new = sorted(tp for tp in wanted if tp not in start)
    if new:
        warnings.append(f"{where} has no position for {len(new)} partition(s) "
                        f"({describe_offsets({tp: 0 for tp in new}).replace('@0', '')}): they "
                        + ("start where startingOffsets says" if options.starting_given else
                           "start at their earliest offsets, as the old query would have read "
                           "them once found (set startingOffsets to choose otherwise)"))
    return start, warnings


def check_starting_overlap(options: SourceOptions, from_savepoint: Mapping[TopicPartitionKey, int]
                           ) -> None:
    """JSON starting positions and the savepoint must not both set one partition."""
    spec = options.starting
    if not isinstance(spec, (SpecificOffsets, PartitionTimestamps)):
        return
    given = spec.as_dict()
    both = sorted(tp for tp in given if tp in from_savepoint)
    if both:
        option = ("startingOffsets" if isinstance(spec, SpecificOffsets)
                  else "startingOffsetsByTimestamp")
        raise KafkaConfigError(
            f"options 'savepoint' and '{option}' both set the start of "
            f"{describe_offsets({tp: 0 for tp in both}).replace('@0', '')}: with a savepoint, "
            f"'{option}' may name only the partitions the savepoint does not have (drop those "
            "partitions from it)")


class StartingOffsets(NamedTuple):
    """Where a read starts, and which of its partitions start at their log start ("earliest")."""

    offsets: PartitionOffsets
    at_log_start: frozenset[TopicPartitionKey]


def starting_offsets(reader: "KafkaOffsetReader", options: SourceOptions,
                     tps: list[TopicPartitionKey], *,
                     latest: Mapping[TopicPartitionKey, int] | None = None) -> StartingOffsets:
    """Where a new query (or a batch read) starts: ``startingOffsets`` resolved for ``tps``; with
    option ``savepoint``, the savepoint's positions for the partitions it has and
    ``startingOffsets`` for the others. The file is read here, once, on the driver."""
    if options.savepoint is None:
        return StartingOffsets(reader.resolve(options.starting, tps, starting=True, latest=latest),
                               at_log_start(options.starting, tps))
    sp = read_savepoint(options.savepoint, error=KafkaConfigError, name="option 'savepoint'")
    start, warnings = savepoint_start(sp, options, tps)
    for w in warnings:
        log.warning("%s", w)
    check_starting_overlap(options, start)
    rest = [tp for tp in tps if tp not in start]
    # A partition the old query had not read yet it would have read from its earliest offset
    # once found (Spark's rule for new partitions): the default startingOffsets (latest, for a
    # stream) would skip what was written to it meanwhile.
    spec = options.starting if options.starting_given or not start else EarliestOffsets()
    out = reader.resolve(spec, rest, starting=True, latest=latest) if rest else {}
    reader.check_specific_starting(
        start, set(start), option="savepoint",
        hint=" (was the savepoint taken on another cluster, or the topic deleted and created "
             "again since?)")
    out.update(start)
    log.info("txkafka starting from savepoint %s (%s): %s", redact_uri(options.savepoint),
             describe_basis(sp.basis, sp.batch_id), describe_offsets(start))
    return StartingOffsets(out, at_log_start(spec, rest))
