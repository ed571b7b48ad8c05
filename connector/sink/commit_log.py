"""The sink's commit log: durable decisions and outcomes, beside Spark's own under the checkpoint.

Why under the checkpoint: the log shares the query's life; deleting the checkpoint resets both.
Why pyarrow.fs: HDFS, S3 and GCS work as well as local disk.

Layout (``<checkpoint>/txkafka-sink/``):
    sink.json                               the sink's identity (sink id, prefix)
    place.json                              where the checkpoint lives (written at the first
                                            start; rewritten by ``txkafka commit-log moved``):
                                            a moved or copied checkpoint stops the query
    start-checks.json                       what the start checks found (start_checks), a
                                            cache: rewritten as brokers that did not answer do,
                                            recomputed when in another format
    log/<batch>-<round>.decision.json       "commit these transactions" (written before any EndTxn),
                                            with the batch's source offsets and task layout
    log/<batch>-<round>.outcome.json        which were committed, which the broker had aborted
    log/<batch>-000.empty.json              a batch that committed with nothing to decide (no
                                            rows): its source offsets, in one write
    log/<batch>-<round>.unresolved.json     only when Kafka could not tell a decided transaction's
                                            outcome: what is known, and the operator's answers
                                            (rewritten as answers come; the round stays pending)

Every batch Spark ran through the sink has a record carrying Spark's ``offsets/N`` source lines
(invariant 11), so a re-planned batch id is compared with what the sink committed for it.

Decisions, outcomes, empty-batch records and sink.json are created exclusively, never replaced
(invariant 14): on local disk as a hard link of the fsynced temporary file, which fails if the
name exists; on S3 by a conditional PUT the store refuses if the name exists (If-None-Match,
checkpoint/object_store.py), where the store honours it; elsewhere (HDFS, GCS, an S3 store
without conditional writes: pyarrow has no create-if-absent, and its HDFS rename
replaces) by a check before the write and a read-back of the writer's nonce after it, which
catches a second driver unless both write within the same moment (docs/design.md, "Exclusive
records"). A second driver on the same checkpoint gets ConcurrentWriterError. The unresolved
note and the place record (by the operator's command only) are the rewritable records.

Every record carries its format version and the txkafka version that wrote it (connector/formats.py,
which owns the versions); every read checks the version first, so a record a newer txkafka wrote
in a format this one does not read stops the sink (NewerFormatError) before it acts on anything.

A batch normally has one round. When the broker aborted a decided transaction before its commit
landed (timeout), the outcome lists it as lost; the re-run of that batch writes exactly those task
partitions again as the next round, if it has the same task layout (invariant 12).
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from ..errors import CheckpointMovedError, CommitLogError, ConcurrentWriterError
from ..formats import (
    DECISION,
    EMPTY_BATCH,
    OUTCOME,
    PLACE,
    SINK_JSON,
    UNRESOLVED,
    FileFormat,
    check_record,
    stamp,
)
from .committable import KafkaCommittable
from .partition_input import PartitionInput
from ..secrets_redaction import redact_uri
from ..checkpoint.object_store import ExclusiveS3, S3Settings
from ..checkpoint.spark_checkpoint import SparkCheckpoint

SINK_DIR = "txkafka-sink"
_RECORD = re.compile(r"^(\d{20})-(\d{3})\.(decision|outcome|unresolved|empty)\.json$")
# What os.link raises where the local filesystem has no hard links (FAT, some FUSE/SMB mounts).
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK}


@dataclass(frozen=True)
class SinkIdentity:
    sink_id: str
    prefix: str
    created_ms: int


Layout = dict[int, PartitionInput]  # task partition -> what it read


@dataclass
class Round:
    number: int
    decision: list[KafkaCommittable]
    all_partitions: list[int]
    outcome: dict[str, Any] | None = None
    # Spark's offsets/N source lines when the round was decided; None in records written before
    # txkafka recorded them (they cannot be compared).
    source_offsets: tuple[str, ...] | None = None
    # Every task partition that reported, with what it read; None in older records.
    layout: Layout | None = None
    empty: bool = False  # an empty-batch record: nothing was decided

    @property
    def lost(self) -> list[KafkaCommittable]:
        if not self.outcome:
            return []
        return [KafkaCommittable.from_json(c) for c in self.outcome.get("lost", [])]


@dataclass
class BatchState:
    batch_id: int
    rounds: list[Round] = field(default_factory=list)

    @property
    def last(self) -> Round:
        return self.rounds[-1]

    @property
    def pending(self) -> Round | None:
        """A decided round whose EndTxn calls may not all have landed: roll it forward."""
        return self.last if self.rounds and self.last.outcome is None else None

    @property
    def complete(self) -> bool:
        return bool(self.rounds) and self.last.outcome is not None and not self.last.lost

    @property
    def empty(self) -> bool:
        """The batch committed with nothing to decide (an empty-batch record)."""
        return bool(self.rounds) and self.rounds[0].empty

    @property
    def redo_partitions(self) -> frozenset[int]:
        """Task partitions whose transactions the broker aborted: the re-run writes only these."""
        if not self.rounds or self.last.outcome is None:
            return frozenset()
        return frozenset(c.partition_id for c in self.last.lost)

    @property
    def source_offsets(self) -> tuple[str, ...] | None:
        """The source offsets the sink recorded for this batch (None: records predate them)."""
        return next((r.source_offsets for r in self.rounds if r.source_offsets is not None), None)


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _layout_json(layout: Layout | None) -> dict[str, Any] | None:
    if layout is None:
        return None
    return {str(p): layout[p].to_json() for p in sorted(layout)}


def _layout_from(raw: Any) -> Layout | None:
    if not isinstance(raw, dict):
        return None
    return {int(p): PartitionInput.from_json(v) for p, v in raw.items()}


def _offsets_from(raw: Any) -> tuple[str, ...] | None:
    return tuple(str(x) for x in raw) if isinstance(raw, list) else None


class SinkCommitLog:
    def __init__(self, checkpoint_location: str, s3: S3Settings | None = None) -> None:
        """``s3``: the endpoint and credentials of an S3 checkpoint (default: the AWS
        environment variables and credential chain)."""
        self.location = checkpoint_location
        self.spark = SparkCheckpoint(checkpoint_location, s3=s3)
        self.fs = self.spark.fs
        self.checkpoint_root = self.spark.root
        self.root = f"{self.checkpoint_root}/{SINK_DIR}"
        self.log_dir = f"{self.root}/log"
        self._atomic_put = self.fs.type_name in ("s3", "gcs")
        # S3: records created with conditional writes where the store honours them.
        self._exclusive_s3 = (ExclusiveS3(s3 or S3Settings.from_options(), checkpoint_location)
                              if self.fs.type_name == "s3" else None)

    def check_store(self) -> None:
        """At the sink's start: fail now, naming the checkpoint and what the store refused,
        when the checkpoint's object store cannot be written (credentials, endpoint, bucket,
        or the s3 extra missing); learns whether its records can be created exclusively."""
        if self._exclusive_s3 is not None:
            self._exclusive_s3.check(self.checkpoint_root.partition("/")[0])

    def __repr__(self) -> str:
        return f"SinkCommitLog({redact_uri(self.root)})"

    def require_spark_checkpoint(self) -> None:
        """Fail unless Spark's own checkpoint is where this log is.

        Spark writes ``<checkpoint>/metadata`` when a query starts, before it creates the sink. If
        it is not visible here, txkafka resolved checkpointLocation to another place than Spark
        did: a path without a scheme is Spark's on Hadoop's default filesystem (HDFS, DBFS) but the
        driver's local disk for pyarrow. A commit log there would not follow the query to another
        driver host, and a restart there would commit a batch twice.
        """
        if not self.spark.has_metadata():
            path = self.spark.metadata_path
            shown = redact_uri(self.location)
            raise CommitLogError(
                f"option 'checkpointLocation' ({shown!r}): Spark's checkpoint metadata is not at "
                f"{redact_uri(path)} ({self.fs.type_name} filesystem), where txkafka keeps the "
                "sink's commit log beside it. Spark resolves a path without a scheme against "
                "Hadoop's default filesystem (fs.defaultFS), txkafka against the driver's local "
                "disk: give checkpointLocation as a full URI (hdfs://namenode:8020/..., "
                "s3://bucket/..., file:///...).")

    # ------------------------------------------------------------------ io

    def _write(self, path: str, payload: dict[str, Any], *, exclusive: bool = True) -> None:
        """Write a record atomically; ``exclusive``: only if no record of that name exists."""
        nonce = secrets.token_hex(8)
        data = json.dumps({**payload, "writer": nonce} if exclusive else payload,
                          sort_keys=True, indent=1).encode()
        parent = path.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        if self._atomic_put:
            # Object stores: no rename. The store refuses a second create where it supports
            # conditional writes (S3's If-None-Match); elsewhere check, write, read back.
            if exclusive and self._exclusive_s3 is not None and self._exclusive_s3.create(
                    path, data, self._taken):
                return
            if exclusive:
                self._refuse_if_exists(path)
            with self.fs.open_output_stream(path) as out:
                out.write(data)
            if exclusive:
                self._confirm_writer(path, nonce)
            return
        tmp = f"{parent}/.{path.rsplit('/', 1)[1]}.{uuid.uuid4().hex}.tmp"
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        local = isinstance(self.fs, pafs.LocalFileSystem)
        if local:
            # Make the record survive a machine crash, not only a process crash: its bytes...
            _fsync(tmp, os.O_RDONLY)
            if exclusive and self._link(tmp, path):
                # ...and the new name, which lives in the directory.
                _fsync(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
                return
        if exclusive:
            try:
                self._refuse_if_exists(path)
            except ConcurrentWriterError:
                self.fs.delete_file(tmp)
                raise
        self.fs.move(tmp, path)
        if local:
            # ...and the rename, which lives in the directory (lost on power failure otherwise).
            _fsync(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        if exclusive:
            self._confirm_writer(path, nonce)

    def _link(self, tmp: str, path: str) -> bool:
        """Create ``path`` as a hard link of ``tmp`` (atomic, fails if it exists); False where the
        filesystem has no hard links. The temporary name is removed either way."""
        try:
            os.link(tmp, path)
        except FileExistsError:
            os.unlink(tmp)
            raise self._taken(path) from None
        except OSError as e:
            if e.errno in _NO_LINKS:
                return False
            os.unlink(tmp)
            raise CommitLogError(f"cannot write {redact_uri(path)}: {e}") from None
        os.unlink(tmp)
        return True

    def _refuse_if_exists(self, path: str) -> None:
        try:
            exists = self.fs.get_file_info(path).type != pafs.FileType.NotFound
        except OSError as e:
            raise CommitLogError(f"cannot check {redact_uri(path)}: {e}") from None
        if exists:
            raise self._taken(path)

    def _confirm_writer(self, path: str, nonce: str) -> None:
        """Read the record back: another writer's nonce means it raced this one and won."""
        rec = self._read(path)
        if rec is None or rec.get("writer") != nonce:
            raise self._taken(path)

    def _taken(self, path: str) -> ConcurrentWriterError:
        name = path.rsplit("/", 1)[1]
        return ConcurrentWriterError(
            f"{redact_uri(path)} was created by another writer: a second driver is running this "
            f"query on the same checkpoint ({redact_uri(self.location)}), for example a relaunched "
            f"driver while the old one is still alive, and it wrote {name!r} first. txkafka never "
            "replaces a record of its commit log, so this driver decides and commits nothing "
            "more and fails. Stop every other driver of this query (its Spark application), then "
            "restart one: it completes what the log holds exactly once.")

    def _record(self, path: str, fmt: FileFormat) -> dict[str, Any] | None:
        """A record of the log, if this txkafka reads its format (NewerFormatError otherwise)."""
        rec = self._read(path)
        if rec is not None:
            check_record(fmt, rec, redact_uri(path), damaged=CommitLogError,
                         checkpoint=redact_uri(self.location))
        return rec

    def _read(self, path: str) -> dict[str, Any] | None:
        try:
            with self.fs.open_input_stream(path) as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            if "not found" in str(e).lower() or "no such file" in str(e).lower():
                return None
            raise CommitLogError(f"cannot read {path}: {e}") from None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise CommitLogError(f"sink commit log record {path} is corrupt: {e}") from None

    # ------------------------------------------------------------ identity

    def existing_identity(self) -> SinkIdentity | None:
        """The sink's identity if this checkpoint has one; never creates it (operator tools: a
        mistyped path must not become a new, empty sink)."""
        rec = self._record(f"{self.root}/sink.json", SINK_JSON)
        if rec is None:
            return None
        return SinkIdentity(str(rec["sink_id"]), str(rec.get("prefix", "txkafka")),
                            int(rec.get("created_ms", 0)))

    def identity(self, prefix: str) -> SinkIdentity:
        """The sink's id, created on first use. The prefix may change between runs; the id not."""
        path = f"{self.root}/sink.json"
        rec = self._record(path, SINK_JSON)
        if rec is None:
            rec = {"sink_id": secrets.token_hex(4), "prefix": prefix,
                   "created_ms": int(time.time() * 1000), **stamp(SINK_JSON)}
            try:
                self._write(path, rec)
            except ConcurrentWriterError:
                pass  # created meanwhile by another start: its identity is the sink's
            rec = self._record(path, SINK_JSON) or rec
        return SinkIdentity(str(rec["sink_id"]), str(rec.get("prefix", prefix)),
                            int(rec.get("created_ms", 0)))

    # ------------------------------------------------------------- place

    @property
    def place(self) -> str:
        """Where this checkpoint lives, one spelling per place (SparkCheckpoint.place)."""
        return self.spark.place

    def recorded_place(self) -> str | None:
        """The place the sink's log was recorded for (None: not recorded yet, an older txkafka)."""
        path = f"{self.root}/place.json"
        rec = self._record(path, PLACE)
        if rec is None:
            return None
        if not isinstance(rec.get("place"), str):
            raise CommitLogError(f"{redact_uri(path)} is damaged: it names no place")
        return rec["place"]

    def refuse_if_elsewhere(self, error: type[Exception], risk: str, if_copied: str) -> None:
        """For the operator's commands, which must not act for a copy on the original's
        transactional ids: raise ``error`` when the sink's log was recorded for another place
        (moved or copied here). Reads only. ``risk`` and ``if_copied`` may name ``{elsewhere}``."""
        elsewhere = self.recorded_place()
        if elsewhere is None or elsewhere == self.place:
            return
        shown = redact_uri(self.location)
        raise error(
            f"--checkpoint {shown}: the sink's commit log was recorded for the checkpoint at "
            f"{elsewhere}; this one was moved or copied here, and {risk.format(elsewhere=elsewhere)}. "
            f"If it was moved, run `txkafka commit-log moved --checkpoint {shown} --yes` first; if "
            f"it was copied, {if_copied.format(elsewhere=elsewhere)} (docs/operations.md, "
            "'Checkpoint moved or copied')")

    def require_own_place(self) -> None:
        """Fail unless the sink's log was recorded for this checkpoint's place; record it when
        nothing is (a new checkpoint, or one an older txkafka wrote: it adopts its place).

        Why: a checkpoint copied to run a second query beside the first carries the first's
        sink.json, so both would use the same transactional ids and each one's orphan sweep would
        abort the other's pre-committed transactions, at every batch.
        """
        recorded = self.recorded_place()
        if recorded is None:
            try:
                self.record_place(exclusive=True)
            except ConcurrentWriterError:
                pass  # another start of this query recorded it meanwhile: compared below
            recorded = self.recorded_place()
        here = self.place
        if recorded is None or recorded == here:
            return
        ident = self.existing_identity()
        sink = f" (sink id {ident.sink_id})" if ident is not None else ""
        shown = redact_uri(self.location)
        raise CheckpointMovedError(
            f"option 'checkpointLocation' ({shown!r}): the sink's commit log here was recorded "
            f"for the checkpoint at {recorded}, not at {here} ({redact_uri(self.root)}/place.json): "
            f"the checkpoint was moved or copied. A copy shares the sink's transactional "
            f"ids{sink} with the query at {recorded}, and each query's clean-up would abort the "
            "other's open transactions, so this query stops before anything is written. If it "
            f"was moved (no query runs at {recorded} any more): record the new place with "
            f"`txkafka commit-log moved --checkpoint {shown} --yes` and start the query again. If "
            f"it was copied to run beside the query at {recorded}: start this query on a NEW "
            "checkpointLocation instead, which gives it its own sink id, from the startingOffsets "
            f"that `txkafka commit-log show --checkpoint {shown}` prints, or from a savepoint of "
            f"the query at {recorded} (stopped for `txkafka savepoint create`, then restarted "
            "there); docs/operations.md, 'Checkpoint moved or copied'.")

    def record_place(self, *, exclusive: bool = False) -> None:
        """Record this checkpoint's place as the sink's (``exclusive``: only if none is; else
        replacing the record: the operator's ``txkafka commit-log moved``)."""
        self._write(f"{self.root}/place.json", {
            "place": self.place, "recorded_ms": int(time.time() * 1000), **stamp(PLACE)},
            exclusive=exclusive)

    # ------------------------------------------------------------- start checks

    def read_start_checks(self) -> dict[str, Any] | None:
        """What the sink's start checks found for this query (start_checks), if recorded."""
        return self._read(f"{self.root}/start-checks.json")

    def write_start_checks(self, record: dict[str, Any]) -> None:
        """Replaced as the checks learn more; never part of the commit protocol."""
        self._write(f"{self.root}/start-checks.json", record, exclusive=False)

    # ------------------------------------------------------------- records

    def _name(self, batch_id: int, round_no: int, kind: str) -> str:
        return f"{self.log_dir}/{batch_id:020d}-{round_no:03d}.{kind}.json"

    def write_decision(self, batch_id: int, round_no: int, committables: list[KafkaCommittable],
                       all_partitions: list[int], *,
                       source_offsets: tuple[str, ...] | None = None,
                       layout: Layout | None = None) -> None:
        self._write(self._name(batch_id, round_no, "decision"), {
            "batch_id": batch_id,
            "round": round_no,
            **stamp(DECISION),
            "decided_ms": int(time.time() * 1000),
            "all_partitions": sorted(all_partitions),
            "source_offsets": list(source_offsets) if source_offsets is not None else None,
            "layout": _layout_json(layout),
            "transactions": [c.to_json() for c in committables],
        })

    def write_empty(self, batch_id: int, source_offsets: tuple[str, ...] | None,
                    all_partitions: list[int], extra: dict[str, Any] | None = None) -> None:
        """A batch that committed with nothing to decide: one record, its source offsets
        (``extra``: the sink's figures, fields that no decision reads)."""
        self._write(self._name(batch_id, 0, "empty"), {
            "batch_id": batch_id,
            **(extra or {}),
            **stamp(EMPTY_BATCH),
            "completed_ms": int(time.time() * 1000),
            "all_partitions": sorted(all_partitions),
            "source_offsets": list(source_offsets) if source_offsets is not None else None,
        })

    def write_outcome(self, batch_id: int, round_no: int, committed: list[KafkaCommittable],
                      lost: list[KafkaCommittable], extra: dict[str, Any] | None = None) -> None:
        self._write(self._name(batch_id, round_no, "outcome"), {
            "batch_id": batch_id,
            "round": round_no,
            "completed_ms": int(time.time() * 1000),
            "committed": [c.transactional_id for c in committed],
            "records": sum(c.record_count for c in committed),
            # key and value bytes of the committed transactions (None: a task did not count them)
            "bytes": (sum(c.byte_count for c in committed)
                      if all(c.byte_count >= 0 for c in committed) else None),
            "lost": [c.to_json() for c in lost],
            **(extra or {}),
            **stamp(OUTCOME),
        })

    def has_decision(self, batch_id: int, round_no: int) -> bool:
        """Whether round ``round_no`` of a batch is decided: one stat, not a listing (a task asks
        this twice; task_writer.LateCheck)."""
        path = self._name(batch_id, round_no, "decision")
        try:
            return self.fs.get_file_info(path).type != pafs.FileType.NotFound
        except OSError as e:
            raise CommitLogError(f"cannot read {redact_uri(path)}: {e}") from None

    def _unresolved_name(self, batch_id: int, round_no: int) -> str:
        return self._name(batch_id, round_no, "unresolved")

    def read_unresolved(self, batch_id: int, round_no: int) -> dict[str, Any] | None:
        """What commit attempts learnt, and the operator decided, about a round whose outcome
        Kafka could not tell (committer); None if the round never got there."""
        return self._record(self._unresolved_name(batch_id, round_no), UNRESOLVED)

    def write_unresolved(self, batch_id: int, round_no: int, note: dict[str, Any]) -> None:
        """Kept beside the round's records; the round stays pending until an outcome is written.
        The one record that is rewritten (as the operator's answers come)."""
        self._write(self._unresolved_name(batch_id, round_no), {**note, **stamp(UNRESOLVED)},
                    exclusive=False)

    def _entries(self) -> dict[int, dict[int, set[str]]]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.log_dir, allow_not_found=True))
        except OSError as e:
            raise CommitLogError(f"cannot list {self.log_dir}: {e}") from None
        out: dict[int, dict[int, set[str]]] = {}
        for info in infos:
            m = _RECORD.match(info.base_name)
            if m:
                out.setdefault(int(m.group(1)), {}).setdefault(int(m.group(2)), set()).add(m.group(3))
        return out

    def listing(self) -> dict[int, dict[int, set[str]]]:
        """One listing of the log, {batch: {round: kinds}}, to pass to ``batch_state``."""
        return self._entries()

    def batch_ids(self) -> list[int]:
        return sorted(self._entries())

    def batch_state(self, batch_id: int, _entries: dict | None = None) -> BatchState | None:
        entries = (_entries if _entries is not None else self._entries()).get(batch_id)
        if not entries:
            return None
        state = BatchState(batch_id)
        if any("empty" in kinds for kinds in entries.values()):
            return self._empty_state(batch_id, entries)
        for round_no in sorted(entries):
            if "decision" not in entries[round_no]:
                raise CommitLogError(
                    f"batch {batch_id} round {round_no} has an outcome but no decision in "
                    f"{self.log_dir}"
                )
            dec = self._record(self._name(batch_id, round_no, "decision"), DECISION)
            if dec is None:
                # Listed a moment ago: read as "no transactions" it would mark the round done
                # while its transactions time out (a lost batch).
                raise CommitLogError(
                    f"batch {batch_id} round {round_no}: its decision was listed but could not be "
                    f"read (deleted meanwhile?) in {self.log_dir}; check the checkpoint's storage")
            outcome = None
            if "outcome" in entries[round_no]:
                outcome = self._record(self._name(batch_id, round_no, "outcome"), OUTCOME)
            state.rounds.append(Round(
                round_no,
                [KafkaCommittable.from_json(c) for c in dec.get("transactions", [])],
                list(dec.get("all_partitions", [])),
                outcome,
                _offsets_from(dec.get("source_offsets")),
                _layout_from(dec.get("layout")),
            ))
        return state

    def _empty_state(self, batch_id: int, entries: dict[int, set[str]]) -> BatchState:
        other = sorted(f"{batch_id:020d}-{r:03d}.{k}.json" for r, kinds in entries.items()
                       for k in kinds if k != "empty")
        if other or set(entries) != {0}:
            # Two drivers wrote different things for one batch: nothing here can be trusted.
            raise CommitLogError(
                f"batch {batch_id} has an empty-batch record and other records ({', '.join(other)}) "
                f"in {self.log_dir}: two drivers ran this query on one checkpoint. Stop every "
                "driver, then check the output (txkafka verify) before restarting one.")
        rec = self._record(self._name(batch_id, 0, "empty"), EMPTY_BATCH)
        if rec is None:
            raise CommitLogError(
                f"batch {batch_id}: its empty-batch record was listed but could not be read "
                f"(deleted meanwhile?) in {self.log_dir}; check the checkpoint's storage")
        return BatchState(batch_id, [Round(
            0, [], list(rec.get("all_partitions", [])),
            {"committed": [], "lost": [], "records": 0, "completed_ms": rec.get("completed_ms"),
             "swept": rec.get("swept")},
            _offsets_from(rec.get("source_offsets")), None, empty=True)])

    def latest(self) -> BatchState | None:
        entries = self._entries()
        if not entries:
            return None
        return self.batch_state(max(entries), entries)

    def prune(self, keep_batches: int = 100) -> int:
        """Delete records of all but the newest ``keep_batches`` batches; returns files removed."""
        entries = self._entries()
        old = sorted(entries)[:-keep_batches] if len(entries) > keep_batches else []
        removed = 0
        for b in old:
            for r, kinds in entries[b].items():
                for kind in kinds:
                    try:
                        self.fs.delete_file(self._name(b, r, kind))
                        removed += 1
                    except OSError:
                        pass
        return removed

    def spark_source_offsets(self, batch_id: int) -> str | None:
        """The source offsets Spark logged for a batch (``offsets/N``), for error messages."""
        try:
            return self.spark.describe_offsets(batch_id)
        except CommitLogError:
            return None
