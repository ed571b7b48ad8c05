"""``txkafka status``: what an operator asks first about a query, on one screen.

    txkafka status --checkpoint DIR [-b HOST:PORT] [--max-lag N] [--batches N] [--json]

The last batch Spark committed and when the sink finished it; per partition the committed offset
(the end of that batch in Spark's ``offsets/N``), the latest offset (the last stable offset, what a
read_committed reader reaches) and the lag; the sink's newest batches with their figures; the
sink's open transactions; what needs an operator. Everything comes from the checkpoint and, with
``-b``, the cluster: the same readers as ``commit-log show``, ``transactions list`` and
``savepoint create``, so the command is as safe to run beside a running query as they are.

Exit status, for monitoring scripts: 0 healthy, 1 behind (records behind latest above
``--max-lag``), 2 a usage error (argparse), 3 needs an operator, 4 cannot tell (the checkpoint or
the cluster could not be read). Client settings that cannot be used (``--command-config``, ``-X``)
stop it with status 1 and an ``error:`` line, as every command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from .cli_options import (CommandLineError, KafkaConnection, add_checkpoint_option,
                          add_checkpoint_store_options, add_json_flag, add_kafka_options,
                          checkpoint_store_from_args)
from .connector.checkpoint.object_store import S3Settings
from .connector.checkpoint.savepoint import merge_sources, sources_of
from .connector.checkpoint.spark_checkpoint import SparkCheckpoint
from .connector.errors import TxKafkaError
from .connector.secrets_redaction import redact_uri
from .connector.sink.commit_log import SinkCommitLog
from .connector.sink.figures import FiguresReader
from .connector.source.lag import lag_between
from .connector.source.offsets import PartitionOffsets

# The statuses of every command (txkafka/exit_codes.py), by what they mean for a query here.
from .exit_codes import FINDINGS as BEHIND, NEEDS_OPERATOR, OK as HEALTHY, USAGE  # noqa: F401
from .exit_codes import UNREACHABLE as CANNOT_TELL
_STATES = {HEALTHY: "HEALTHY", BEHIND: "BEHIND", NEEDS_OPERATOR: "NEEDS AN OPERATOR"}
# What each status means for this command, under --help (the general table is txkafka --help's).
STATUS_EPILOG = f"""exit status:
  {HEALTHY}  healthy: nothing needs an operator, lag at most --max-lag
  {BEHIND}  behind: lag above --max-lag
  {USAGE}  the command line is wrong: an unknown option, unusable client settings
  {NEEDS_OPERATOR}  needs an operator: an unknown outcome, a moved or copied checkpoint
  {CANNOT_TELL}  cannot tell: the checkpoint or the cluster could not be read"""


def committed_positions(spark: SparkCheckpoint) -> tuple[int | None, PartitionOffsets, list[str]]:
    """(Spark's newest committed batch, the positions its txkafka/Kafka sources reached, notes)."""
    batch = spark.latest_committed_batch()
    if batch is None:
        return None, {}, []
    entry = spark.read_offsets(batch)
    if entry is None:
        return batch, {}, [f"offsets/{batch} is missing: the committed positions are unknown"]
    sources, _notes = sources_of(entry, batch_start=False)
    merged, conflicts = merge_sources(sources)
    notes = [f"topic {t} is read by several sources at different offsets: left out"
             for t in sorted(conflicts)]
    return batch, merged, notes


def latest_offsets(conn: KafkaConnection, topics: list[str]) -> PartitionOffsets:
    """Each partition's last stable offset: where a read_committed reader (the query's) ends."""
    from .kafka_admin import end_offsets

    return {(t, p): off for t in topics for p, off in end_offsets(conn.client_conf, t).items()}


def collect(checkpoint: str, conn: KafkaConnection | None, *, max_lag: int,
            batches: int, s3: S3Settings | None = None) -> dict[str, Any]:
    """Everything the screen and --json show, and the verdict (``exit_code``). ``s3``: an S3
    checkpoint's settings from the command line (default: the AWS environment)."""
    spark = SparkCheckpoint(checkpoint, s3=s3)
    if not spark.has_metadata():
        raise CommandLineError(
            f"--checkpoint {redact_uri(checkpoint)}: no Spark checkpoint there ({spark.metadata_path} "
            "does not exist). Give the checkpointLocation of a query.")
    log = SinkCommitLog(checkpoint, s3)
    ident = log.existing_identity()
    out: dict[str, Any] = {"checkpoint": redact_uri(checkpoint), "query_id": spark.query_id(),
                           "sink_id": ident.sink_id if ident else None,
                           "planned_batch": spark.latest_offsets_batch(), "notes": [],
                           "needs_operator": []}
    batch, positions, notes = committed_positions(spark)
    out["notes"] += notes
    out["committed_batch"] = batch
    figures = FiguresReader(log).newest(batches) if ident else []
    out["sink_batches"] = [f.to_json() for f in figures]
    finished = [f for f in figures if f.status in ("complete", "empty")]
    out["sink_last_finished"] = ({"batch": finished[-1].batch_id,
                                  "completed_ms": finished[-1].completed_ms} if finished else None)
    if ident:
        for f in figures:
            if f.status == "unresolved":
                out["needs_operator"].append(
                    f"batch {f.batch_id}: the outcome of decided transactions is unknown; check "
                    f"the output, then `txkafka commit-log resolve --checkpoint {out['checkpoint']} "
                    f"--batch {f.batch_id} --committed|--lost`")
        recorded = log.recorded_place()
        if recorded is not None and recorded != log.place:
            out["needs_operator"].append(
                f"the checkpoint was moved or copied here from {recorded}: the query stops until "
                f"`txkafka commit-log moved --checkpoint {out['checkpoint']} --yes` (moved) or it "
                "runs on a new checkpoint (copied)")
    rows = []
    if conn is None:
        out["notes"].append("no --bootstrap-servers: latest offsets, lag and open transactions "
                            "not looked up")
        out["lag"] = None
        out["open_transactions"] = None
    else:
        latest = latest_offsets(conn, sorted({t for t, _ in positions}))
        lag = lag_between(positions, latest)
        out["lag"] = lag.to_json()
        rows = [{"topic": t, "partition": p, "committed": positions.get((t, p)),
                 "latest": latest[(t, p)], "lag": lag.partitions[(t, p)]}
                for t, p in sorted(latest)]
        out["open_transactions"] = _open(conn, checkpoint, s3) if ident else []
    out["partitions"] = rows
    behind = out["lag"]["recordsBehindLatest"] if out["lag"] else 0
    out["max_lag"] = max_lag
    out["exit_code"] = (NEEDS_OPERATOR if out["needs_operator"]
                        else BEHIND if behind > max_lag else HEALTHY)
    out["state"] = _STATES[out["exit_code"]]
    return out


def _open(conn: KafkaConnection, checkpoint: str, s3: S3Settings | None) -> list[dict]:
    from .operator_cli import open_transactions, sink_selection

    return open_transactions(conn, sink_selection(checkpoint, s3=s3))


def _when(ms: int | None) -> str:
    if not ms:
        return "unknown"
    ago = max(0.0, time.time() - ms / 1000)
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(ms / 1000))} UTC ({ago:.0f} s ago)"


def screen(s: dict[str, Any]) -> str:
    """The one screen an operator reads."""
    lines = [f"txkafka status of {s['checkpoint']}",
             f"  query {s['query_id']}, sink {s['sink_id'] or 'none (not a txkafka sink)'}"]
    lag = s["lag"]
    why = ""
    if s["exit_code"] == BEHIND:
        why = f" ({lag['recordsBehindLatest']} records behind latest > --max-lag {s['max_lag']})"
    lines.append(f"state: {s['state']}{why}")
    last = s["sink_last_finished"]
    lines.append(f"last committed batch: {s['committed_batch']} (Spark's commits/); sink finished "
                 + (f"batch {last['batch']} at {_when(last['completed_ms'])}" if last else "none")
                 + f"; planned: {s['planned_batch']}")
    if s["partitions"]:
        lines.append(f"  {'topic partition':<40} {'committed':>12} {'latest':>12} {'lag':>10}")
        for r in s["partitions"]:
            committed = "-" if r["committed"] is None else r["committed"]
            lines.append(f"  {r['topic'] + '[' + str(r['partition']) + ']':<40} "
                         f"{committed:>12} {r['latest']:>12} {r['lag']:>10}")
    if lag:
        lines.append(f"  behind latest: {lag['recordsBehindLatest']} records (avg "
                     f"{lag['avgOffsetsBehindLatest']:.1f}, max {lag['maxOffsetsBehindLatest']}, "
                     f"min {lag['minOffsetsBehindLatest']} offsets per partition)")
    if s["sink_batches"]:
        lines.append("sink batches (newest last):")
        lines.append(f"  {'batch':>7} {'status':<10} {'txns':>5} {'records':>9} {'bytes':>11} "
                     f"{'commit ms':>9} {'aborted':>7} {'lost':>4} {'rolled':>6} {'rewrit':>6} "
                     f"{'late':>4}  finished")
        for b in s["sink_batches"]:
            ms = "-" if b["commit_ms"] is None else f"{b['commit_ms']:.0f}"
            size = "-" if b["bytes"] is None else b["bytes"]
            when = (time.strftime("%H:%M:%S", time.gmtime(b["completed_ms"] / 1000))
                    if b["completed_ms"] else "-")
            lines.append(f"  {b['batch_id']:>7} {b['status']:<10} {b['committed']:>5} "
                         f"{b['records']:>9} {size:>11} {ms:>9} {b['aborted']:>7} {b['lost']:>4} "
                         f"{b['rolled_forward']:>6} {b['rewritten']:>6} {b['late_swept']:>4}  {when}")
    opened = s["open_transactions"]
    if opened is not None:
        lines.append(f"open transactions of the sink: {len(opened) or 'none'}")
        for r in opened:
            flag = " [decided: committed on restart]" if r["decided_pending_commit"] else ""
            lines.append(f"  {r['transactional_id']} age {r['age_s']} s of {r['timeout_s']} s "
                         f"timeout, partitions {r['partitions']}{flag}")
    lines.append("needs an operator: " + ("nothing" if not s["needs_operator"] else ""))
    lines += [f"  - {n}" for n in s["needs_operator"]]
    lines += [f"note: {n}" for n in s["notes"]]
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    # A command line whose client settings cannot be used stops as every command's does.
    conn = KafkaConnection.optional_from_args(args)
    s3 = checkpoint_store_from_args(args)
    from confluent_kafka import KafkaException

    try:
        s = collect(args.checkpoint, conn, max_lag=args.max_lag, batches=args.batches, s3=s3)
    except (CommandLineError, TxKafkaError, OSError, KafkaException) as e:
        # Its own status, not 1: a script must not read "cannot tell" as "behind".
        text = str(e.code if isinstance(e, CommandLineError) else f"error: {e}")
        print(text, file=sys.stderr)
        return CANNOT_TELL
    print(json.dumps(s, indent=2) if args.json else screen(s))
    return s["exit_code"]


def register_cli(sub) -> None:
    p = sub.add_parser(
        "status", help="print a query's state on one screen: lag, the sink's last batches, open "
        "transactions, what needs an operator", epilog=STATUS_EPILOG)
    add_checkpoint_option(p)
    add_kafka_options(p, required=False, cluster="the cluster the query reads and writes "
                      "(default: none; then no latest offsets, lag or open transactions)")
    add_checkpoint_store_options(p)
    p.add_argument("--max-lag", type=int, default=0, metavar="RECORDS",
                   help="records behind latest (every partition together) above which the "
                        "query is behind (exit status 1)")
    p.add_argument("--batches", type=int, default=5, metavar="N",
                   help="how many of the sink's newest batches to show")
    add_json_flag(p, "everything")
    p.set_defaults(func=cmd_status)
