"""``txkafka savepoint``: move a stopped pipeline to a new checkpoint, a changed query or another
parallelism, exactly once.

    txkafka savepoint create --checkpoint CK --out SP -b HOST:PORT [-X k=v ...] [--quiet-period S] [--yes]
    txkafka savepoint show SP [--json]

``create`` works on a stopped query: it watches the checkpoint and the sink's transactions for a
quiet period (refusing if the query still moves), resolves the sink (rolls a decided round
forward, aborts the sink's open transactions no decision covers; refuses an unknown outcome or
lost partitions awaiting a re-run), then writes the end offsets of the newest batch whose output
is committed. Without ``--yes`` it runs the same checks and prints what it would commit, abort and
write, changing nothing. A new query started with ``.option("savepoint", SP)`` reads from there.
``create()`` is the same as a function (the chaos campaign calls it).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

import pyarrow.fs as pafs

from . import __version__, exit_codes
from .connector.errors import (
    CommitLogError,
    KafkaProtocolError,
    SavepointError,
    TransactionError,
    TransactionOutcomeUnknownError,
)
from .connector.sink.committer import KafkaCommitter
from .connector.source.offsets import describe_offsets
from .connector.checkpoint.savepoint import (
    BASIS_BATCH_0,
    Savepoint,
    committed_batch,
    has_kafka_source,
    merge_sources,
    read_savepoint,
    sources_of,
    write_savepoint,
)
from .connector.checkpoint.object_store import S3Settings
from .connector.secrets_redaction import redact_uri
from .connector.sink.commit_log import SINK_DIR, SinkCommitLog
from .connector.sink.options import SinkConfig
from .connector.checkpoint.spark_checkpoint import (
    BATCH_FOLDERS,
    OffsetLogEntry,
    checkpoint_filesystem,
    same_source_offsets,
)
from .connector.sink.transactional_ids import TransactionalIdFactory

log = logging.getLogger(__name__)

DEFAULT_QUIET_PERIOD_S = 15.0
# The checkpoint folders a running query writes to at every batch (Spark's, then the sink's).
WATCHED = (*BATCH_FOLDERS, SINK_DIR)
# Transaction states the coordinator reaches by itself (a timeout abort, writing markers): a dead
# query's transactions may move this way while it is watched, a live one's otherwise too.
_BY_ITSELF = {("Ongoing", "PrepareAbort"), ("Ongoing", "CompleteAbort"),
              ("PrepareAbort", "CompleteAbort"), ("PrepareCommit", "CompleteCommit"),
              ("CompleteAbort", "Empty"), ("CompleteCommit", "Empty")}
_COMMITTING = {"PrepareCommit", "CompleteCommit"}

Watermarks = Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]]


# ------------------------------------------------------------------------------ liveness

@dataclass(frozen=True)
class TxnView:
    state: str
    producer_id: int
    epoch: Optional[int] = None
    start_ms: Optional[int] = None
    partitions: frozenset[tuple[str, int]] = frozenset()


@dataclass
class Snapshot:
    """What a running query changes: checkpoint files, the sink's transactions, and the log end
    of the partitions those transactions have open (records written into them)."""

    files: dict[str, tuple[int, int]] = field(default_factory=dict)   # path -> (size, mtime_ns)
    txns: dict[str, TxnView] = field(default_factory=dict)
    watermarks: dict[tuple[str, int], int] = field(default_factory=dict)


def movements(before: Snapshot, after: Snapshot) -> list[str]:
    """What changed between two snapshots that only a live query (or another writer) explains."""
    out: list[str] = []
    for path in sorted(set(before.files) | set(after.files)):
        if path not in before.files:
            out.append(f"{path} appeared")
        elif path not in after.files:
            out.append(f"{path} was deleted")
        elif before.files[path] != after.files[path]:
            out.append(f"{path} changed")
    for tid, now in sorted(after.txns.items()):
        was = before.txns.get(tid)
        if was is None:
            out.append(f"transaction {tid} appeared ({now.state})")
        elif now.state == "Ongoing" and (
                was.state != "Ongoing"
                or (was.producer_id, was.epoch, was.start_ms) != (now.producer_id, now.epoch,
                                                                  now.start_ms)):
            out.append(f"transaction {tid} began (producer id {now.producer_id}, epoch {now.epoch})")
        elif now.state == "Ongoing" and not now.partitions <= was.partitions:
            grown = describe_offsets({tp: 0 for tp in now.partitions - was.partitions})
            out.append(f"transaction {tid} added partitions {grown.replace('@0', '')}")
        elif now.state in _COMMITTING and (was.state not in _COMMITTING
                                           or was.producer_id != now.producer_id):
            out.append(f"transaction {tid} committed")
        elif was.state != now.state and (was.state, now.state) not in _BY_ITSELF \
                and now.state not in _COMMITTING:
            out.append(f"transaction {tid} went from {was.state} to {now.state}")
    for tp, high in sorted(after.watermarks.items()):
        low = before.watermarks.get(tp)
        if low is not None and high > low:
            holders = sorted(tid for tid, t in after.txns.items()
                             if t.state == "Ongoing" and tp in t.partitions)
            out.append(f"records were written to {tp[0]}-{tp[1]} (log end {low} -> {high}) while "
                       f"the sink's transaction {', '.join(holders) or '?'} is open on it")
    return out


class _Watch:
    def __init__(self, commit_log: SinkCommitLog, ids: Sequence[TransactionalIdFactory], client,
                 watermarks: Watermarks) -> None:
        self.log = commit_log
        self.ids = ids
        self.client = client
        self.watermarks = watermarks

    def snapshot(self) -> Snapshot:
        snap = Snapshot()
        fs, root = self.log.fs, self.log.checkpoint_root
        for folder in WATCHED:
            try:
                infos = fs.get_file_info(pafs.FileSelector(f"{root}/{folder}", recursive=True,
                                                           allow_not_found=True))
            except OSError as e:
                raise SavepointError(f"cannot list {redact_uri(root)}/{folder}: {e}") from None
            for i in infos:
                if i.type == pafs.FileType.File:
                    snap.files[i.path[len(root) + 1:]] = (i.size or 0, i.mtime_ns or 0)
        listed = {}
        for f in self.ids:
            for t in self.client.list_transactions(prefix=f.sink_prefix, states=[]):
                if f.owns(t.transactional_id):
                    listed[t.transactional_id] = t
        ongoing = [tid for tid, t in listed.items() if t.state == "Ongoing"]
        descs = self.client.describe(ongoing) if ongoing else {}
        for tid, t in listed.items():
            d = descs.get(tid)
            if d is not None and not d.error_code:
                parts = frozenset((topic, p) for topic, ps in d.partitions.items() for p in ps)
                snap.txns[tid] = TxnView(d.state, d.producer_id, d.producer_epoch,
                                         d.start_time_ms, parts)
            else:
                snap.txns[tid] = TxnView(t.state, t.producer_id)
        open_parts = sorted({tp for t in snap.txns.values() if t.state == "Ongoing"
                             for tp in t.partitions})
        if open_parts:
            snap.watermarks = self.watermarks(open_parts)
        return snap


def kafka_watermarks(kafka_conf: Mapping[str, str]) -> Watermarks:
    """Log end offsets (read_uncommitted: open transactions' records count) through librdkafka."""

    def fetch(tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        quiet = logging.getLogger("txkafka.savepoint.librdkafka")
        quiet.propagate = False
        c = Consumer({**kafka_conf, "group.id": f"txkafka-savepoint-{uuid.uuid4().hex[:8]}",
                      "isolation.level": "read_uncommitted", "enable.auto.commit": False,
                      "logger": quiet})
        out: dict[tuple[str, int], int] = {}
        try:
            for t, p in tps:
                try:
                    out[(t, p)] = c.get_watermark_offsets(TopicPartition(t, p), timeout=15,
                                                          cached=False)[1]
                except KafkaException as e:
                    # Left out: this signal is then not watched for the partition (said so).
                    log.warning("savepoint: cannot read the log end of %s-%d (%s); records "
                                "written into the sink's open transaction there go unseen", t, p, e)
        finally:
            c.close()
        return out

    return fetch


def _observe(watch: _Watch, quiet_period_s: float, sleep: Callable[[float], None],
             shown: str) -> None:
    before = watch.snapshot()
    sleep(quiet_period_s)
    moved = movements(before, watch.snapshot())
    if moved:
        more = f" (and {len(moved) - 6} more)" if len(moved) > 6 else ""
        raise SavepointError(
            f"--checkpoint {shown}: the query still looks alive: within {quiet_period_s:g}s "
            f"{'; '.join(moved[:6])}{more}. A savepoint is taken of a stopped query: stop it, "
            "wait until its driver has exited, and run the command again. If it is stopped and "
            "something else explains these changes (another producer writing to those output "
            "partitions, an operator), --quiet-period 0 skips this check. Nothing was changed.")


# ------------------------------------------------------------------------------- create

def _resolve_sink(commit_log: SinkCommitLog, ids: Sequence[TransactionalIdFactory], client,
                  bootstrap: str, shown: str) -> dict[str, Any]:
    """Roll a decided round forward, refuse what cannot be resolved, abort the orphans."""
    cfg = SinkConfig.from_options({"kafka.bootstrap.servers": bootstrap,
                                   "checkpointLocation": commit_log.location}, streaming=True)
    before = commit_log.latest()
    pending = before.batch_id if before is not None and before.pending is not None else None
    try:
        state = KafkaCommitter(cfg, ids[0], commit_log, client=client).recover()
    except TransactionOutcomeUnknownError as e:
        raise SavepointError(
            f"no savepoint: the output's content is not known. {e} Once it is resolved, create "
            "the savepoint again (nothing was written).") from None
    except (TransactionError, KafkaProtocolError, CommitLogError) as e:
        raise SavepointError(
            f"no savepoint: batch {pending} of {shown} is decided but its commit could not be "
            f"completed now ({e}). The decision stands; run the command again once the cluster "
            "answers (nothing was written).") from None
    if state is not None and state.redo_partitions:
        lost = state.last.lost
        parts = "; ".join(f"task partition {c.partition_id} ({c.record_count} records to "
                          f"{c.describe_partitions() or 'unknown partitions'})" for c in lost)
        raise SavepointError(
            f"no savepoint: batch {state.batch_id} of {shown} is partly in the output: the broker "
            f"aborted its decided transactions of {parts} before their commit landed, and only a "
            "re-run of that batch with the same task layout writes them. Restart the original "
            "query (same checkpoint, same plan and partitioning) until it has committed batch "
            f"{state.batch_id}, stop it, then create the savepoint.")
    aborted = 0
    for f in ids:
        aborted += KafkaCommitter(cfg, f, commit_log, client=client).sweep_orphans()
    resolved: dict[str, Any] = {"orphans_aborted": aborted}
    if pending is not None:
        resolved["rolled_forward_batch"] = pending
    return resolved


@dataclass(frozen=True)
class _Target:
    """A checkpoint a savepoint may be taken of, checked: a txkafka sink, Spark's metadata, Kafka
    source offsets, its recorded place, and a free ``--out``."""

    shown: str
    commit_log: SinkCommitLog
    ident: Any
    spark: Any
    ids: list[TransactionalIdFactory]


def _check(checkpoint: str, out: str, prefix: Optional[str],
           s3: Optional[S3Settings] = None) -> _Target:
    shown = redact_uri(checkpoint)
    commit_log = SinkCommitLog(checkpoint, s3)
    ident = commit_log.existing_identity()
    if ident is None:
        raise SavepointError(
            f"--checkpoint {shown}: no exactly-once txkafka sink there "
            f"({redact_uri(commit_log.root)}/sink.json does not exist). A savepoint records the "
            "source positions that match what the sink's output holds, which only txkafka's "
            "exactly-once sink (format('txkafka'), deliveryGuarantee=exactly_once) can tell. Give "
            "the checkpointLocation of such a query.")
    spark = commit_log.spark
    if not spark.has_metadata():
        raise SavepointError(f"--checkpoint {shown}: Spark's checkpoint metadata is not there; "
                             "give the query's checkpointLocation")
    out_fs, out_path = checkpoint_filesystem(out, error=SavepointError, name="--out", s3=s3)
    if out_fs.get_file_info(out_path).type != pafs.FileType.NotFound:
        raise SavepointError(f"--out {redact_uri(out)} exists already; a savepoint is never "
                             "overwritten: give another path (or move the old file away)")
    newest = spark.latest_offsets_batch()
    entry = spark.read_offsets(newest) if newest is not None else None
    if entry is not None and not has_kafka_source(entry):
        raise SavepointError(
            f"--checkpoint {shown}: no source of this query logs Kafka offsets (offsets/{newest}: "
            f"{' | '.join(entry.sources) or 'no source'}). A savepoint restores Kafka positions "
            "only: the query must read with format('txkafka') (or Spark's 'kafka').")

    from .operator_cli import _prefixes_in_log

    names = [prefix] if prefix else list(dict.fromkeys(
        [*_prefixes_in_log(commit_log, ident.sink_id), ident.prefix]))
    ids = [TransactionalIdFactory(p, ident.sink_id) for p in names]
    # A copy's sink id is the original's: resolving it would abort that query's transactions.
    commit_log.refuse_if_elsewhere(
        SavepointError, "resolving the sink here could abort the open transactions of a query at "
        "{elsewhere}, which has the same transactional ids",
        "take the savepoint of the checkpoint at {elsewhere}, with its query stopped")
    return _Target(shown, commit_log, ident, spark, ids)


def _with_client(kafka_conf: Mapping[str, str], client, work: Callable[[Any], Any]) -> Any:
    from .connector.client.transactions import TransactionClient

    tc = client if client is not None else TransactionClient(kafka_conf)
    try:
        return work(tc)
    finally:
        if client is None:
            tc.close()


def plan(checkpoint: str, out: str, kafka_conf: Mapping[str, str], *,
         prefix: Optional[str] = None, quiet_period_s: float = DEFAULT_QUIET_PERIOD_S,
         client=None, watermarks: Optional[Watermarks] = None,
         sleep: Callable[[float], None] = time.sleep,
         s3: Optional[S3Settings] = None) -> dict[str, Any]:
    """What ``create`` would do, changing nothing: the same checks (the quiet period included),
    then the decided transactions it would commit, the open ones it would abort and the batch
    whose end offsets it would write. Raises SavepointError as ``create`` does."""
    t = _check(checkpoint, out, prefix, s3)

    def look(tc) -> dict[str, Any]:
        if quiet_period_s > 0:
            _observe(_Watch(t.commit_log, t.ids, tc, watermarks or kafka_watermarks(kafka_conf)),
                     quiet_period_s, sleep, t.shown)
        latest = t.commit_log.latest()
        pending = latest.pending if latest is not None else None
        decided = {c.transactional_id for c in pending.decision} if pending else set()
        open_ids = sorted({x.transactional_id for f in t.ids
                           for x in tc.list_transactions(prefix=f.sink_prefix, states=["Ongoing"])
                           if f.owns(x.transactional_id)})
        sink_complete = (latest.batch_id if latest is not None
                         and (latest.complete or pending is not None) else None)
        batch, _basis = committed_batch(t.spark.latest_committed_batch(), sink_complete)
        return {
            "checkpoint": t.shown, "out": redact_uri(out),
            "roll_forward_batch": latest.batch_id if pending is not None else None,
            "would_commit": sorted(i for i in open_ids if i in decided),
            "would_abort": [i for i in open_ids if i not in decided],
            "positions_after_batch": batch,
        }

    return _with_client(kafka_conf, client, look)


def create(checkpoint: str, out: str, kafka_conf: Mapping[str, str], *,
           prefix: Optional[str] = None, quiet_period_s: float = DEFAULT_QUIET_PERIOD_S,
           client=None, watermarks: Optional[Watermarks] = None,
           sleep: Callable[[float], None] = time.sleep, s3: Optional[S3Settings] = None) -> str:
    """Take a savepoint of the stopped query on ``checkpoint`` and write it to ``out``.

    ``kafka_conf`` is librdkafka's config of the sink's cluster (``bootstrap.servers`` and any
    security settings). Returns ``out``. Raises SavepointError, with nothing written, when the
    query looks alive, the sink cannot be resolved, or the checkpoint has no txkafka sink or
    Kafka-shaped source offsets. ``s3``: the settings of a checkpoint and ``out`` on S3 (default:
    the AWS environment). ``client``/``watermarks``/``sleep`` are for tests.
    """
    t = _check(checkpoint, out, prefix, s3)
    shown, commit_log, ident, spark, ids = t.shown, t.commit_log, t.ident, t.spark, t.ids

    def resolve(tc) -> dict[str, Any]:
        if quiet_period_s > 0:
            watch = _Watch(commit_log, ids, tc, watermarks or kafka_watermarks(kafka_conf))
            _observe(watch, quiet_period_s, sleep, shown)
        return _resolve_sink(commit_log, ids, tc, str(kafka_conf.get("bootstrap.servers")), shown)

    resolved = _with_client(kafka_conf, client, resolve)

    latest = commit_log.latest()
    sink_complete = latest.batch_id if latest is not None and latest.complete else None
    batch, basis = committed_batch(spark.latest_committed_batch(), sink_complete)
    rolled_back = ""
    if batch is None:
        first = spark.read_offsets(0)
        sources, notes = sources_of(first, batch_start=True) if first is not None else ([], [])
        if first is not None:
            basis = BASIS_BATCH_0
    else:
        done = spark.read_offsets(batch)
        recorded = _sink_offsets(commit_log, batch)
        if recorded is not None and (done is None
                                     or not same_source_offsets(recorded, done.sources)):
            # The output holds what the sink committed. Spark's offsets/N says otherwise after a
            # rollback: a re-planned batch N that the sink refused (CheckpointMismatchError).
            done = OffsetLogEntry(batch, {}, recorded)
            rolled_back = (f"Spark's offsets/{batch} is missing or reads other offsets than the "
                           f"sink committed for batch {batch} (a rolled-back or edited "
                           "checkpoint); the positions are the sink's")
        if done is None:
            raise SavepointError(
                f"--checkpoint {shown}: batch {batch} is committed but Spark's offsets/{batch} "
                "is missing, so what it read is unknown: restore the file from a backup")
        if not has_kafka_source(done):
            raise SavepointError(f"--checkpoint {shown}: offsets/{batch} has no Kafka offsets")
        sources, notes = sources_of(done, batch_start=False)
    if rolled_back:
        notes = [rolled_back, *notes]
    positions, conflicts = merge_sources(sources)
    sp = Savepoint(
        positions=positions, conflicts=conflicts, sources=tuple(sources),
        origin={"checkpoint": shown, "query_id": spark.query_id(), "sink_id": ident.sink_id,
                "sink_prefix": ids[0].sink_prefix, "batch_id": batch, "basis": basis},
        created_ms=int(time.time() * 1000), txkafka_version=__version__, resolved=resolved,
        notes=tuple(notes))
    write_savepoint(sp, out, s3)
    return out


def _sink_offsets(commit_log: SinkCommitLog, batch: int) -> Optional[tuple[str, ...]]:
    """The source offsets the sink recorded with ``batch`` (None: no record of it, or one
    written before txkafka recorded them)."""
    state = commit_log.batch_state(batch)
    return state.source_offsets if state is not None else None


# ---------------------------------------------------------------------------------- CLI

def cmd_create(args: argparse.Namespace) -> int:
    from .cli_options import CommandLineError, KafkaConnection, checkpoint_store_from_args

    if args.quiet_period < 0:
        raise CommandLineError("--quiet-period must be >= 0 seconds")
    conf = KafkaConnection.from_args(args).client_conf
    s3 = checkpoint_store_from_args(args)
    try:
        if not args.yes:
            would = plan(args.checkpoint, args.out, conf, prefix=args.prefix,
                         quiet_period_s=args.quiet_period, s3=s3)
            _print_plan(would, args.json)
            return exit_codes.OK
        out = create(args.checkpoint, args.out, conf, prefix=args.prefix,
                     quiet_period_s=args.quiet_period, s3=s3)
        sp = read_savepoint(out, s3=s3)
    except SavepointError as e:
        raise CommandLineError(str(e), exit_codes.for_error(e)) from None
    if args.json:
        print(json.dumps(sp.to_json(), indent=1))
    else:
        print(f"savepoint written to {redact_uri(out)}")
        print(sp.text(out))
    return exit_codes.OK


def _print_plan(would: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"dry_run": True, **would}, indent=1))
        return
    if would["roll_forward_batch"] is not None:
        print(f"would roll batch {would['roll_forward_batch']} forward: commit its decided "
              f"transaction(s) {', '.join(would['would_commit']) or '(none open)'}")
    print(f"would abort {len(would['would_abort'])} open transaction(s) no decision covers"
          + (f": {', '.join(would['would_abort'])}" if would["would_abort"] else ""))
    after = would["positions_after_batch"]
    print(f"would write {would['out']}: the end offsets of batch {after}" if after is not None
          else f"would write {would['out']}: the start offsets of batch 0 (no batch committed)")
    print("Nothing was changed. Add --yes to do it, with the query stopped.")


def cmd_show(args: argparse.Namespace) -> int:
    from .cli_options import CommandLineError, checkpoint_store_from_args

    s3 = checkpoint_store_from_args(args)
    try:
        sp = read_savepoint(args.savepoint, s3=s3)
    except SavepointError as e:
        raise CommandLineError.unreadable(str(e)) from None
    print(json.dumps(sp.to_json(), indent=1) if args.json else sp.text(args.savepoint))
    return 0


def register_cli(sub) -> None:
    from .cli_options import (add_checkpoint_option, add_checkpoint_store_options, add_json_flag,
                              add_kafka_options, add_yes_flag)

    s = sub.add_parser("savepoint", help="move a stopped pipeline to a new checkpoint or a "
                       "changed query, exactly once")
    ssub = s.add_subparsers(dest="action", required=True, title="actions", metavar="ACTION")
    c = ssub.add_parser("create", help="resolve the sink of a stopped query and write the source "
                        "positions matching its output")
    add_kafka_options(c, cluster="the sink's Kafka cluster")
    add_checkpoint_option(c, note="the query must be stopped")
    c.add_argument("--out", required=True, metavar="FILE", help="the savepoint file to create (a "
                   "path or a pyarrow.fs URI); never overwritten")
    c.add_argument("--prefix", help="the query's transactionalIdPrefix (default: the ones its "
                   "commit log used)")
    c.add_argument("--quiet-period", type=float, default=DEFAULT_QUIET_PERIOD_S, metavar="SECONDS",
                   help="how long to watch the checkpoint and the sink's transactions; anything "
                   "moving means the query is alive; 0 skips the check")
    add_yes_flag(c, "commit the decided transactions, abort the others and write the savepoint")
    add_json_flag(c, "the savepoint (or, without --yes, the plan)")
    add_checkpoint_store_options(c)
    c.set_defaults(func=cmd_create)
    sh = ssub.add_parser("show", help="print what a savepoint holds")
    sh.add_argument("savepoint", metavar="FILE",
                    help="the savepoint file (a path or a pyarrow.fs URI)")
    add_json_flag(sh, "the savepoint")
    add_checkpoint_store_options(sh)
    sh.set_defaults(func=cmd_show)


if __name__ == "__main__":  # pragma: no cover
    from .cli import main

    sys.exit(main(["savepoint", *sys.argv[1:]]))
