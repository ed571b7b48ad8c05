"""Operator commands: the sink's open transactions and its commit log.

    txkafka transactions list  -b HOST:PORT (--checkpoint DIR | --prefix P) [--all] [--json]
    txkafka transactions abort -b HOST:PORT (--checkpoint DIR | --prefix P --force) [--transactional-id ID ...] [--yes]
    txkafka commit-log show    --checkpoint DIR [--last N] [--json]
    txkafka commit-log resolve --checkpoint DIR --batch N (--committed | --lost) [--transactional-id ID ...] [--yes]
    txkafka commit-log moved   --checkpoint DIR [--force] [--yes]

Client settings (security) come from a properties file (``--command-config``) and ``-X key=value``,
an S3 checkpoint's from ``--conf spark.hadoop.fs.s3a.*`` and ``--properties-file`` (cli_options.py);
secret values are never printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from . import exit_codes
from .cli_options import (CommandLineError, KafkaConnection, add_checkpoint_option,
                          add_checkpoint_store_options, add_json_flag, add_kafka_options,
                          add_transactional_id_option, add_yes_flag, checkpoint_store_from_args)
from .connector.checkpoint.object_store import S3Settings
from .connector.errors import TxKafkaError
from .connector.secrets_redaction import redact_uri
from .connector.checkpoint.savepoint import resume_option
from .connector.sink.commit_log import SinkCommitLog, SinkIdentity
from .connector.sink.transactional_ids import TransactionalIdFactory, prefix_of


def _open_log(checkpoint: str, s3: S3Settings | None = None) -> tuple[SinkCommitLog, SinkIdentity]:
    """The sink commit log of an existing txkafka sink under ``checkpoint``, never a new one.
    ``s3``: an S3 checkpoint's settings from the command line (default: the AWS environment)."""
    log = SinkCommitLog(checkpoint, s3)
    ident = log.existing_identity()
    if ident is None:
        raise CommandLineError.unreadable(
            f"--checkpoint {redact_uri(checkpoint)}: no txkafka sink there ({log.root}/sink.json "
            "does not exist). Give the checkpointLocation of a query that writes with format('txkafka').")
    return log, ident


class _Selection:
    """The transactions an operator command may touch: one sink's ids, or a raw --prefix."""

    def __init__(self, prefixes: list[str], sink_ids: list[TransactionalIdFactory] | None,
                 pending: set[str]) -> None:
        self.prefixes = prefixes          # what ListTransactions is asked for
        self.sink_ids = sink_ids          # with --checkpoint: exactly this sink's id shape
        self.pending = pending            # ids of a decided round that has no outcome yet

    @property
    def label(self) -> str:
        return " or ".join(repr(p) for p in self.prefixes)

    def owns(self, transactional_id: str) -> bool:
        if self.sink_ids is None:
            return any(transactional_id.startswith(p) for p in self.prefixes)
        return any(f.owns(transactional_id) for f in self.sink_ids)


def _prefixes_in_log(log: SinkCommitLog, sink_id: str) -> list[str]:
    """The transactionalIdPrefix values the sink's decisions used, newest first.

    sink.json keeps the prefix the sink was created with; the ids use the query's current
    ``transactionalIdPrefix`` option (only the sink id is fixed), so a renamed prefix shows here.
    """
    entries = log._entries()
    found: list[str] = []
    for b in sorted(entries, reverse=True):
        st = log.batch_state(b, entries)
        for rnd in reversed(st.rounds if st else []):
            for c in rnd.decision:
                p = prefix_of(c.transactional_id, sink_id)
                if p and p not in found:
                    found.append(p)
    return found


def _select(args: argparse.Namespace) -> _Selection:
    """What to act on, and the ids a decided-but-unfinished batch still needs."""
    if args.checkpoint:
        return sink_selection(args.checkpoint, args.prefix, checkpoint_store_from_args(args))
    if not args.prefix:
        raise CommandLineError("give --checkpoint (the query's checkpointLocation) or --prefix")
    return _Selection([args.prefix], None, set())


def sink_selection(checkpoint: str, prefix: str | None = None,
                   s3: S3Settings | None = None) -> _Selection:
    """The transactional ids of the sink under ``checkpoint`` (``prefix``: the query's
    transactionalIdPrefix; default: the ones its log used)."""
    log, ident = _open_log(checkpoint, s3)
    if prefix:
        names = [prefix]
    else:
        names = list(dict.fromkeys([*_prefixes_in_log(log, ident.sink_id), ident.prefix]))
    latest = log.latest()
    pending = {c.transactional_id for c in latest.pending.decision} if latest and latest.pending else set()
    factories = [TransactionalIdFactory(p, ident.sink_id) for p in names]
    return _Selection([f.sink_prefix for f in factories], factories, pending)


def _listed(tc, sel: _Selection, states: list[str]):
    seen: dict[str, object] = {}
    for p in sel.prefixes:
        for t in tc.list_transactions(prefix=p, states=states):
            if sel.owns(t.transactional_id):
                seen.setdefault(t.transactional_id, t)
    return [seen[k] for k in sorted(seen)]


def open_transactions(conn: KafkaConnection, sel: _Selection, *, every_state: bool = False
                      ) -> list[dict]:
    """The selected transactions the cluster has open (``every_state``: in any state), one row
    each: id, state, producer, age, timeout, partitions, and whether a decided batch holds it."""
    from .connector.client.transactions import TransactionClient

    pending = sel.pending
    with TransactionClient(conn.client_conf) as tc:
        listed = _listed(tc, sel, [] if every_state else ["Ongoing"])
        descs = tc.describe(t.transactional_id for t in listed) if listed else {}
    now = time.time() * 1000
    rows = []
    for t in listed:
        d = descs.get(t.transactional_id)
        rows.append({
            "transactional_id": t.transactional_id,
            "state": t.state,
            "producer_id": t.producer_id,
            "producer_epoch": d.producer_epoch if d else None,
            "age_s": round((now - d.start_time_ms) / 1000, 1) if d and d.start_time_ms > 0 else None,
            "timeout_s": d.timeout_ms / 1000 if d else None,
            "partitions": {k: v for k, v in (d.partitions if d else {}).items()},
            "decided_pending_commit": t.transactional_id in pending,
        })
    return rows


def cmd_list(args: argparse.Namespace) -> int:
    conn = KafkaConnection.from_args(args)
    sel = _select(args)
    rows = open_transactions(conn, sel, every_state=args.all)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{len(rows)} transaction(s) with prefix {sel.label}")
        for r in rows:
            flag = "  [DECIDED: will be committed on restart]" if r["decided_pending_commit"] else ""
            print(f"  {r['transactional_id']:<48} {r['state']:<14} pid={r['producer_id']} "
                  f"epoch={r['producer_epoch']} age={r['age_s']}s partitions={r['partitions']}{flag}")
    return 0


def cmd_abort(args: argparse.Namespace) -> int:
    from .connector.client.transactions import TransactionClient

    conn = KafkaConnection.from_args(args)
    sel = _select(args)
    pending = sel.pending
    by_prefix_alone = not args.checkpoint and not args.force
    if by_prefix_alone and args.yes:
        raise CommandLineError(
            "refusing to abort by --prefix alone: without --checkpoint txkafka cannot tell which "
            "transactions belong to a batch that is decided but not yet committed (aborting those "
            "loses the batch). Give --checkpoint, or add --force if the query is abandoned.")
    if args.checkpoint and not args.force:
        SinkCommitLog(args.checkpoint, checkpoint_store_from_args(args)).refuse_if_elsewhere(
            CommandLineError.needs_operator, "the open transactions of these ids may be a query's at {elsewhere}",
            "give --checkpoint {elsewhere}, or add --force")
    named = list(dict.fromkeys(args.id or []))
    foreign = [tid for tid in named if not sel.owns(tid)]
    if foreign:
        raise CommandLineError(
            f"--transactional-id {', '.join(foreign)}: not a transactional id of "
            f"{'this sink' if args.checkpoint else 'the --prefix'} (ids start with {sel.label})")
    with TransactionClient(conn.client_conf) as tc:
        listed = [t for t in _listed(tc, sel, ["Ongoing"])
                  if not named or t.transactional_id in named]
        not_open = [tid for tid in named if tid not in {t.transactional_id for t in listed}]
        if not_open:
            print(f"not an open transaction (ended already, or never started): "
                  f"{', '.join(not_open)}", file=sys.stderr)
        protected = [t.transactional_id for t in listed if t.transactional_id in pending]
        if protected and not args.force:
            print(f"refusing to abort {len(protected)} transaction(s) of a decided batch (the query "
                  f"commits them when it restarts; aborting loses them): {', '.join(protected)}. "
                  "Use --force to abort anyway.", file=sys.stderr)
        targets = [t for t in listed if args.force or t.transactional_id not in pending]
        # what is left to do, whatever happens to the others: a named id that is not open is a
        # finding; a decided batch's transactions wait for an operator (restart the query)
        held = exit_codes.NEEDS_OPERATOR if protected and not args.force else (
            exit_codes.FINDINGS if not_open else exit_codes.OK)
        if not targets:
            print("nothing to abort")
            return held
        if not args.yes:
            print(f"would abort {len(targets)} transaction(s): "
                  f"{', '.join(t.transactional_id for t in targets)}; add "
                  f"{'--yes --force' if by_prefix_alone else '--yes'} to do it")
            return held
        descs = tc.describe(t.transactional_id for t in targets)
        codes = tc.end_many([(d.transactional_id, d.producer_id, d.producer_epoch)
                             for d in descs.values() if d.state == "Ongoing"], commit=False)
    ok = sum(1 for c in codes.values() if c == 0)
    print(f"aborted {ok} of {len(codes)} transaction(s)")
    return held if ok == len(codes) else exit_codes.FINDINGS


def _status(log: SinkCommitLog, st) -> str:
    if st.empty:
        return "complete (no rows)"
    if st.complete:
        return "complete"
    if st.pending is None:
        return f"lost partitions {sorted(st.redo_partitions)}"
    if log.read_unresolved(st.batch_id, st.pending.number) is not None:
        return "OUTCOME UNKNOWN: commit-log resolve"
    return "decided, not finished"


def cmd_log(args: argparse.Namespace) -> int:
    """The newest batches of the sink's log: status, rounds and the source offsets each read.

    Why the offsets: after a rolled-back or partly deleted checkpoint (CheckpointMismatchError),
    a query continues on a new checkpoint from the end offsets of the last complete batch.
    """
    log, ident = _open_log(args.checkpoint, checkpoint_store_from_args(args))
    listing = log.listing()
    batches = sorted(listing)[-args.last:] if args.last > 0 else []
    out = []
    for b in batches:
        st = log.batch_state(b, listing)
        if st is None:
            continue
        out.append({
            "batch": b,
            "status": _status(log, st),
            "source_offsets": list(st.source_offsets) if st.source_offsets is not None else None,
            "rounds": [] if st.empty else [{
                "round": r.number,
                "transactions": len(r.decision),
                "records": sum(c.record_count for c in r.decision),
                "task_partitions": len(r.layout) if r.layout is not None else None,
                "committed": len(r.outcome.get("committed", [])) if r.outcome else None,
                "lost": [c.partition_id for c in r.lost],
                "end_txn_ms": (r.outcome or {}).get("end_txn_ms"),
                "recovered": (r.outcome or {}).get("recovered"),
            } for r in st.rounds],
        })
    if args.json:
        print(json.dumps({"sink_id": ident.sink_id, "batches": out}, indent=2))
        return 0
    print(f"sink {ident.sink_id} (prefix {ident.prefix!r}) at {log.root}")
    for b in out:
        rounds = "; ".join(f"round {r['round']}: {r['transactions']} txns, {r['records']} records"
                           + (f", commit {r['end_txn_ms']} ms" if r["end_txn_ms"] is not None else "")
                           + (" (rolled forward)" if r["recovered"] else "")
                           + (f", lost {r['lost']}" if r["lost"] else "") for r in b["rounds"])
        print(f"  batch {b['batch']:>8}  {b['status']:<24} {rounds}")
        offsets = b["source_offsets"]
        print(f"  {'':>14}source offsets: "
              + (" | ".join(offsets) if offsets is not None else "not recorded (older txkafka)"))
    last = next((b for b in reversed(out) if b["status"].startswith("complete")), None)
    if last is not None and last["source_offsets"]:
        resume = " | ".join(resume_option(o) for o in last["source_offsets"])
        print(f"last complete batch: {last['batch']}; a query on a new checkpoint continues after "
              f"it with startingOffsets {resume}")
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    """Record the operator's answer for decided transactions whose outcome Kafka cannot tell.

    Why: when the coordinator has forgotten a decided transaction's id, the query stops with
    TransactionOutcomeUnknownError (marking it lost could duplicate, committed could lose). Only
    the output can tell; the operator checks it and records the answer here. ``--committed``:
    nothing is written again; ``--lost``: the restart writes those task partitions again.
    """
    from .connector.sink.committer import known_verdicts

    log, _ident = _open_log(args.checkpoint, checkpoint_store_from_args(args))
    state = log.batch_state(args.batch)
    if state is None or state.pending is None:
        shown = "has no records" if state is None else (
            "is complete" if state.complete else "has an outcome already")
        raise CommandLineError(
            f"batch {args.batch} {shown} in {log.log_dir}: nothing to resolve (only a decided "
            "round without an outcome can be resolved; see `txkafka commit-log show`)")
    rnd = state.pending
    note = log.read_unresolved(args.batch, rnd.number)
    if note is None:
        raise CommandLineError.needs_operator(
            f"batch {args.batch} round {rnd.number} is decided but its outcome was never found "
            "unknown: restart the query and it completes the commit itself. Resolve only a batch "
            "that stopped the query with TransactionOutcomeUnknownError.")
    verdicts = known_verdicts(note)
    decided = [c.transactional_id for c in rnd.decision]
    undetermined = [tid for tid in decided if tid not in verdicts]
    chosen = list(dict.fromkeys(args.id)) if args.id else undetermined
    wrong = [tid for tid in chosen if tid not in undetermined]
    if wrong:
        raise CommandLineError(
            f"--transactional-id {', '.join(wrong)}: not an undetermined transaction of batch {args.batch} round "
            f"{rnd.number}; undetermined: {', '.join(undetermined) or 'none'}")
    verdict = "committed" if args.committed else "lost"
    resolved = {**(note.get("resolved") or {}), **{tid: verdict for tid in chosen}}
    left = [tid for tid in undetermined if tid not in chosen]
    note = {**note, "resolved": resolved}
    final = known_verdicts(note)
    for c in rnd.decision:
        if c.transactional_id in chosen:
            print(f"  {c.transactional_id}: task partition {c.partition_id}, {c.record_count} "
                  f"records to {c.describe_partitions() or 'unknown partitions'} -> {verdict}")
    redo = sorted(c.partition_id for c in rnd.decision if final.get(c.transactional_id) == "lost")
    if left:
        plan = (f"{len(left)} stay undetermined ({', '.join(left)}): the outcome is recorded "
                "once none is")
    elif redo:
        plan = (f"that completes the outcome: restarting the query writes task partitions {redo} "
                f"of batch {args.batch} again")
    else:
        plan = (f"that completes the outcome: batch {args.batch} is done and restarting the query "
                "writes nothing of it again")
    if not args.yes:
        print(f"would mark {len(chosen)} transaction(s) of batch {args.batch} round {rnd.number} "
              f"{verdict}; {plan}. Add --yes to do it (with the query stopped).")
        return 0
    log.write_unresolved(args.batch, rnd.number, {**note, "resolved_ms": int(time.time() * 1000)})
    if not left:
        log.write_outcome(
            args.batch, rnd.number,
            [c for c in rnd.decision if final[c.transactional_id] == "committed"],
            [c for c in rnd.decision if final[c.transactional_id] == "lost"],
            extra={"recovered": True, "resolved_by_operator": resolved})
    print(f"marked {len(chosen)} transaction(s) {verdict}; {plan}.")
    return 0


def _holds_sink(place: str, sink_id: str, s3: S3Settings | None = None) -> bool | None:
    """Whether the checkpoint at ``place`` still has the sink ``sink_id`` (None: cannot tell from
    here: another host's disk, a filesystem this machine cannot open)."""
    try:
        ident = SinkCommitLog(place, s3).existing_identity()
    except (TxKafkaError, OSError):
        return None
    return ident is not None and ident.sink_id == sink_id


def cmd_moved(args: argparse.Namespace) -> int:
    """Record the checkpoint's new place, after it was moved.

    Why: the sink's log names the place it was recorded for, and a query whose checkpoint is
    elsewhere stops (CheckpointMovedError): a copy run beside the original would share its
    transactional ids. A moved checkpoint has no original left, so its new place is recorded here.
    """
    s3 = checkpoint_store_from_args(args)
    log, ident = _open_log(args.checkpoint, s3)
    here, recorded = log.place, log.recorded_place()
    if recorded == here:
        print(f"{here} is the recorded place of sink {ident.sink_id} already: nothing to do")
        return 0
    if recorded is not None:
        held = _holds_sink(recorded, ident.sink_id, s3)
        if held and not args.force:
            raise CommandLineError.needs_operator(
                f"the checkpoint at {recorded} still holds sink {ident.sink_id}: this one was "
                "copied, not moved, and a query there would share the sink's transactional ids "
                "with a query here. If no query will run there again, delete that checkpoint (or "
                "add --force); to run both, start this query on a NEW checkpointLocation instead "
                "(docs/operations.md, 'Checkpoint moved or copied')")
        if held is None:
            print(f"cannot look at {recorded} from here: make sure no query runs there",
                  file=sys.stderr)
    was = recorded or "none recorded"
    if not args.yes:
        print(f"would record {here} as the place of sink {ident.sink_id} (recorded: {was}). Add "
              "--yes to do it, with the query stopped.")
        return 0
    log.record_place()
    print(f"recorded {here} as the place of sink {ident.sink_id} (was: {was}); start the query "
          "on it")
    return 0


def register_cli(sub) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        add_kafka_options(p, cluster="the sink's Kafka cluster")
        add_checkpoint_option(p, required=False, note="finds the sink's ids")
        p.add_argument("--prefix", help="without --checkpoint: the start of the transactional ids "
                       "(e.g. txkafka-1a2b3c4d-); with --checkpoint: the query's "
                       "transactionalIdPrefix option (default: the ones its commit log used)")
        add_checkpoint_store_options(p)

    t = sub.add_parser("transactions", help="list or abort the sink's open transactions")
    tsub = t.add_subparsers(dest="action", required=True, title="actions", metavar="ACTION")
    tl = tsub.add_parser("list", help="list the sink's open transactions")
    common(tl)
    tl.add_argument("--all", action="store_true", help="every state, not only Ongoing")
    add_json_flag(tl, "the rows")
    tl.set_defaults(func=cmd_list)
    ta = tsub.add_parser("abort", help="abort open transactions (never a decided batch's)")
    common(ta)
    add_transactional_id_option(ta, "every open one of the sink")
    add_yes_flag(ta, "abort them")
    ta.add_argument("--force", action="store_true", help="abort a decided batch's transactions "
                    "too (and, with --prefix alone, whatever matches)")
    ta.set_defaults(func=cmd_abort)

    c = sub.add_parser("commit-log", help="show the sink's commit log, resolve an unknown "
                       "outcome, or record a moved checkpoint")
    csub = c.add_subparsers(dest="action", required=True, title="actions", metavar="ACTION")
    cs = csub.add_parser("show", help="print the newest batches: their state, rounds and "
                         "source offsets")
    add_checkpoint_option(cs)
    cs.add_argument("--last", type=int, default=20, metavar="N", help="how many batches")
    add_checkpoint_store_options(cs)
    add_json_flag(cs, "the batches")
    cs.set_defaults(func=cmd_log)
    cr = csub.add_parser("resolve", help="record whether a batch's unknown-outcome transactions "
                         "committed (after checking the output), so the query can continue")
    add_checkpoint_option(cr)
    cr.add_argument("--batch", type=int, required=True, metavar="N",
                    help="the batch whose outcome is unknown (commit-log show marks it)")
    verdict = cr.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--committed", action="store_true",
                         help="their records are in the output: nothing is written again")
    verdict.add_argument("--lost", action="store_true",
                         help="their records are missing: the restart writes those task partitions again")
    add_transactional_id_option(cr, "every undetermined one of the batch")
    add_checkpoint_store_options(cr)
    add_yes_flag(cr, "record the answer in the checkpoint")
    cr.set_defaults(func=cmd_resolve)
    cm = csub.add_parser("moved", help="record a moved checkpoint's new place (a query on a moved "
                         "or copied checkpoint stops with CheckpointMovedError)")
    add_checkpoint_option(cm, note="its new place, where the query runs now")
    cm.add_argument("--force", action="store_true", help="record it even though the old place "
                    "still holds the sink's checkpoint")
    add_checkpoint_store_options(cm)
    add_yes_flag(cm, "record the new place in the checkpoint")
    cm.set_defaults(func=cmd_moved)
