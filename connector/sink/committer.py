"""The driver side of the sink: plan, validate, decide, commit, recover (Flink's KafkaCommitter).

The protocol for batch N (docs/design.md has the failure matrix):
0. Plan (every ``streamWriter()`` call, before the batch's tasks start): roll forward a decided
   round without an outcome, then compare the batch Spark planned (its newest ``offsets/N``) with
   the sink's log: a batch the sink already has must read the same source offsets (invariant 11),
   else CheckpointMismatchError before any task writes. Tasks then write all, none (a replay of a
   committed batch) or only the lost task partitions of the batch.
1. Validate every pre-committed transaction with DescribeTransactions: Ongoing, same producer id and
   epoch, time left before the coordinator's timeout. Any failure: abort all, fail the batch.
2. Decide: write "batch N round R: commit these" to the sink's commit log, durably and exclusively,
   before any EndTxn, with the batch's source offsets and task layout. A batch with nothing to
   decide gets an empty-batch record with its source offsets instead.
3. Commit: EndTxn(commit) for each, in parallel, retrying retriable answers; record the outcome.
4. Sweep: abort every open transaction of this sink that no decision covers (failed attempts,
   speculative losers, the previous run's leftovers).

A decided round without an outcome is rolled forward (never aborted). A re-run of a batch the log
says is complete writes nothing and anything it did write is aborted. A decided transaction that
the broker aborted before its commit landed (confirmed with DescribeTransactions, invariant 15) is
recorded as lost; the batch's re-run writes exactly those task partitions again, if it has the
same task layout (invariant 12), so nothing is lost silently or written twice. A decided
transaction whose outcome Kafka cannot tell (the coordinator forgot its id, or a fenced answer that
DescribeTransactions does not confirm) stops the query (TransactionOutcomeUnknownError) until an
operator records the answer (``commit-log resolve``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Iterable, Mapping, NoReturn, Sequence

from ..errors import (
    CheckpointMismatchError,
    ConcurrentWriterError,
    TaskLayoutChangedError,
    TransactionError,
    TransactionLostError,
    TransactionOutcomeUnknownError,
    TxKafkaError,
)
from ..fault_injection import FaultInjector
from .committable import KafkaCommittable, TaskResult
from ..client.error_codes import INVALID_TXN_STATE, NONE, error_name
from ..checkpoint.savepoint import resume_option
from .partition_input import PartitionInput
from ..secrets_redaction import redact_uri
from .commit_log import BatchState, Layout, SinkCommitLog
from .figures import ABORTED, count_aborts, take_counts
from .options import SinkConfig
from ..checkpoint.spark_checkpoint import same_source_offsets
from ..client.transactions import (
    FENCED_CODES,
    UNKNOWN_ID_CODES,
    TransactionClient,
    TransactionDescription,
)
from .transactional_ids import TransactionalIdFactory
from .other_sinks import note_batches_of_other_sinks, refuse_superseded_decision

log = logging.getLogger(__name__)

# EndTxn(commit) answers that suggest a decided transaction did not commit; DescribeTransactions
# confirms it before it is recorded lost (invariant 15).
_LOST_CODES = FENCED_CODES | {INVALID_TXN_STATE}
_ABORT_STATES = {"PrepareAbort", "CompleteAbort"}
_PRUNE_EVERY = 50
# Warnings already logged by this process, (log root, batch, kind): the planning and the commit
# of a batch both construct a writer and plan it, and a replayed batch is reported once.
_WARNED: set[tuple[str, int, str]] = set()

Key = tuple[str, int, int]  # (transactional id, producer id, epoch): one transaction, not one id


def _show(offsets: Sequence[str] | None) -> str:
    """Source offset lines on one line, as Spark logged them."""
    return " | ".join(offsets) if offsets else "(none)"


def _layout(results: Sequence[TaskResult | None]) -> Layout:
    return {r.partition_id: r.read() for r in results if r is not None}


def _partition_list(layout: Mapping[int, object]) -> str:
    ps = sorted(layout)
    if ps and ps == list(range(ps[0], ps[-1] + 1)) and len(ps) > 2:
        return f"{ps[0]}-{ps[-1]}"
    return ", ".join(map(str, ps)) or "none"


# ----------------------------------------------------------------- unresolved rounds
# A round whose outcome is unknown keeps what its commit attempts did learn (ids that answered NONE
# or were fenced) and the operator's verdicts in ``log/<batch>-<round>.unresolved.json``. The commit
# log's reader ignores that name, so the round stays pending (decided, no outcome) until resolved.

def known_verdicts(note: dict | None) -> dict[str, str]:
    """transactional id -> "committed" | "lost", from earlier EndTxn answers and the operator."""
    if not note:
        return {}
    out = {tid: "committed" for tid in note.get("committed", [])}
    out.update({tid: "lost" for tid in note.get("lost", [])})
    out.update({tid: v for tid, v in (note.get("resolved") or {}).items()
                if v in ("committed", "lost")})
    return out


# Waits before asking again for transactions not seen open (a stale coordinator's answer, above).
_REASK_WAITS_S = (1.0, 2.0, 4.0)


def host_clock() -> float:
    """Seconds on this host's clock that never jumps and counts suspended time (CLOCK_BOOTTIME;
    elsewhere the monotonic clock): one clock for every process on the host, so the driver's
    planning and commit processes can measure a batch's age between them."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


_SKEW_WARNED = threading.Event()  # the driver's clock ahead of a coordinator's: said once


def _not_open_as_reported(d: TransactionDescription | None, c: KafkaCommittable) -> str | None:
    """Why the coordinator's description does not show the task's transaction open at the task's
    producer and epoch, or None when it does."""
    if d is None or d.error_code:
        return f"{c.transactional_id}: not found by the coordinator"
    if d.state != "Ongoing":
        return f"{c.transactional_id}: state {d.state}, expected Ongoing"
    if (d.producer_id, d.producer_epoch) != (c.producer_id, c.producer_epoch):
        return (f"{c.transactional_id}: producer {d.producer_id}/epoch {d.producer_epoch}, the "
                f"task reported {c.producer_id}/{c.producer_epoch} (fenced by another attempt)")
    return None


@dataclass(frozen=True)
class WritePlan:
    """What the tasks of one batch do, decided on the driver while Spark planned the batch."""

    batch_id: int | None = None          # the batch planned; None: unknown (write everything)
    skip: bool = False                   # the sink committed this batch already: write nothing
    redo: frozenset[int] | None = None   # a lost round's task partitions: write only these
    round_no: int = 0                    # the round the tasks write (their late check asks for it)

    def should_write(self, batch_id: int, partition_id: int) -> bool:
        if self.batch_id is not None and batch_id < self.batch_id:
            # One driver plans batch N right after writing offsets/N, so a newer offsets file
            # than the task's batch was written by another driver on this checkpoint.
            raise ConcurrentWriterError(
                f"task partition {partition_id}: Spark runs this task for batch {batch_id} "
                f"(local property streaming.sql.batchId), but the checkpoint's newest offsets/ "
                f"file was already batch {self.batch_id} when Spark planned it: a second driver "
                "is running this query on the same checkpoint, for example a relaunched driver "
                "while the old one is still alive. Nothing was written; this driver fails. Stop "
                "every other driver of this query (its Spark application), then restart one: it "
                "completes what the sink's log holds exactly once.")
        if self.batch_id is not None and batch_id != self.batch_id:
            # The plan was made for another batch: its skip/redo answer would be a guess.
            raise TransactionError(
                f"task partition {partition_id}: Spark runs this task for batch {batch_id} "
                f"(local property streaming.sql.batchId), but the sink planned the writer for "
                f"batch {self.batch_id} (the newest offsets/ file of the checkpoint when Spark "
                "planned it). txkafka refuses to guess which batch's plan applies (a wrong one "
                "could skip or repeat rows); nothing was written. Report this with the Spark "
                "version and trigger.")
        if self.skip:
            return False
        return self.redo is None or partition_id in self.redo


def prune_due(batch_id: int, listing: Mapping[int, object]) -> bool:
    """Prune once per block of ``_PRUNE_EVERY`` batch ids: at the first batch in a new block that
    commits data. (Pruning only when the id is a multiple would never prune a query whose data
    batches all fall on other ids, say odd ones between no-data batches of an aggregation.)"""
    earlier = [b for b in listing if b < batch_id]
    return bool(earlier) and max(earlier) // _PRUNE_EVERY < batch_id // _PRUNE_EVERY


@dataclass
class CommitReport:
    batch_id: int
    transactions: int = 0
    records: int = 0
    aborted: int = 0
    orphans_aborted: int = 0
    seconds: float = 0.0
    skipped: bool = False


# Driver-side clients are reused across batches: Spark reuses the planning and commit processes
# while batches come (it ends one idle for about a minute).
_CLIENTS: dict[tuple, TransactionClient] = {}
_CLIENTS_LOCK = threading.Lock()


def shared_client(kafka_conf: dict[str, str], timeout_s: float) -> TransactionClient:
    key = (tuple(sorted(kafka_conf.items())), timeout_s)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = TransactionClient(kafka_conf, timeout=timeout_s)
        return client


class KafkaCommitter:
    def __init__(
        self,
        cfg: SinkConfig,
        ids: TransactionalIdFactory,
        commit_log: SinkCommitLog | None,
        client: TransactionClient | None = None,
    ) -> None:
        self.cfg = cfg
        self.ids = ids
        self.log = commit_log
        # host_clock() when Spark planned the batch being committed (before its tasks started),
        # on the host where commit runs: no transaction of the batch is older. Set before commit.
        self.planned_at: float | None = None
        self.client = client or shared_client(cfg.kafka, cfg.commit_timeout_ms / 1000.0)
        self.faults = FaultInjector.get()
        self.last_report: CommitReport | None = None

    # ------------------------------------------------------------------ recovery

    def recover(self) -> BatchState | None:
        """Roll forward a decided round that has no outcome yet (invariants 2 and 4).

        Raises TransactionOutcomeUnknownError (the query must stop) when a decided transaction's
        outcome cannot be known, and TransactionError when the commit did not finish (retry).
        """
        if self.log is None:
            return None
        state = self.log.latest()
        if state is not None and state.pending is not None:
            # Another sink may have finished this batch since (a switch to format("kafka")).
            refuse_superseded_decision(self.log, state, self.client)
            state = self._roll_forward(state)
        return state

    def _roll_forward(self, state: BatchState) -> BatchState | None:
        assert self.log is not None and state.pending is not None
        rnd = state.pending
        log.warning("rolling forward batch %d round %d (%d transactions) decided by an earlier "
                    "run", state.batch_id, rnd.number, len(rnd.decision))
        try:
            self._end_round(state.batch_id, rnd.number, rnd.decision, recovering=True)
        except TransactionLostError as e:
            # Recorded in the outcome; this batch's re-run writes the lost partitions again.
            log.error("%s", e)
        return self.log.batch_state(state.batch_id)

    # ------------------------------------------------------------------ planning

    def plan(self) -> WritePlan:
        """While Spark plans a batch (the per-batch ``streamWriter()`` call, before its tasks
        start): recover, then check the batch Spark planned against the log (invariant 11).

        Spark writes ``offsets/N`` before it plans batch N, so the newest offsets file names the
        batch. Raises CheckpointMismatchError when the log already has that batch with other
        source offsets, or has later batches but no record of it.
        """
        self.recover()
        if self.log is None:
            return WritePlan()
        batch_id = self.log.spark.latest_offsets_batch()
        if batch_id is None:
            return WritePlan()
        listing = self.log.listing()
        state = self.log.batch_state(batch_id, listing)
        if state is None and batch_id > 0 and batch_id - 1 not in listing:
            # (every batch the sink ran has a record: only a switch leaves the one before out)
            note_batches_of_other_sinks(self.log, batch_id, max(listing, default=None))
        self._check_source_offsets(batch_id, state, listing)
        if state is not None and state.pending is not None:
            state = self._roll_forward(state)  # only the newest batch is pending normally
        if state is None:
            return WritePlan(batch_id)
        if state.complete:
            self._warn_once(batch_id, "skip", (
                "batch %d: the sink committed this batch already (%s), reading the same source "
                "offsets; Spark runs it again because its commits/%d is missing (a crash after "
                "the sink's commit, or a rolled-back checkpoint). The re-run writes nothing."),
                batch_id, "no rows" if state.empty else f"round {state.last.number}", batch_id)
            return WritePlan(batch_id, skip=True)
        redo = state.redo_partitions
        self._warn_once(batch_id, "redo", (
            "batch %d: re-writing task partitions %s, whose transactions the broker aborted in "
            "round %d; the batch's other task partitions write nothing"),
            batch_id, sorted(redo), state.last.number)
        return WritePlan(batch_id, redo=redo, round_no=state.last.number + 1)

    def _warn_once(self, batch_id: int, kind: str, fmt: str, *args: object) -> None:
        key = (self.log.root if self.log else "", batch_id, kind)
        if key not in _WARNED:
            _WARNED.add(key)
            log.warning(fmt, *args)

    def _check_source_offsets(self, batch_id: int, state: BatchState | None,
                              listing: Mapping[int, object],
                              rerun: Sequence[KafkaCommittable] = ()) -> tuple[str, ...] | None:
        """Invariant 11: the batch Spark runs reads what the sink recorded for it. Returns Spark's
        source lines of ``offsets/N``; on a mismatch aborts ``rerun`` and raises."""
        if self.log is None:
            return None
        entry = self.log.spark.read_offsets(batch_id)
        now = entry.sources if entry is not None else None
        if state is None:
            newer = [b for b in listing if b > batch_id]
            if newer:
                self._abort(rerun)
                raise CheckpointMismatchError(self._unrecorded_message(batch_id, now, max(newer)))
            return now
        recorded = state.source_offsets
        if recorded is None:
            self._warn_once(batch_id, "legacy", (
                "batch %d: the sink's record of this batch predates txkafka recording source "
                "offsets, so Spark's offsets/%d cannot be compared with it; replaying it as "
                "recorded"), batch_id, batch_id)
            return now
        if now is None:
            self._warn_once(batch_id, "no-offsets", (
                "batch %d: Spark's offsets/%d is missing from %s, so it cannot be compared with "
                "the source offsets the sink recorded (%s); replaying the batch as recorded"),
                batch_id, batch_id, redact_uri(self.log.location), _show(recorded))
            return recorded
        if not same_source_offsets(recorded, now):
            self._abort(rerun)
            raise CheckpointMismatchError(self._mismatch_message(batch_id, recorded, now, state))
        return now

    def _last_committed(self) -> tuple[int, tuple[str, ...] | None, list[int]] | None:
        """(batch, its source offsets, later batches not complete) of the log's newest batch
        whose last round completed: where a new checkpoint continues from."""
        assert self.log is not None
        listing = self.log.listing()
        incomplete: list[int] = []
        for b in sorted(listing, reverse=True):
            st = self.log.batch_state(b, listing)
            if st is not None and st.complete:
                return b, st.source_offsets, sorted(incomplete)
            incomplete.append(b)
        return None

    def _recovery_text(self) -> str:
        assert self.log is not None
        ck = redact_uri(self.log.location)
        last = self._last_committed()
        if last is None:
            resume = "the sink's log has no complete batch yet"
        else:
            b, offsets, after = last
            resume = (f"the last batch the sink committed is batch {b}, whose end offsets are "
                      + (f"{_show([resume_option(o) for o in offsets])}" if offsets
                         else "not recorded (an older txkafka)"))
            if after:
                resume += (f" (batches {after} after it are not complete: their committed part is "
                           "in the output too; docs/operations.md)")
        return (f"Nothing of this batch is written. To recover, either restore the removed or "
                f"edited files under {ck}/offsets and {ck}/commits from a backup and restart, or "
                f"continue from what the output holds: start the query on a NEW "
                f"checkpointLocation with the reader's startingOffsets set to the end offsets of "
                f"the last batch the sink committed; {resume}. `txkafka commit-log show "
                f"--checkpoint {ck}` prints each batch's source offsets. See docs/operations.md, "
                f"'Checkpoint rolled back, partly deleted or copied'.")

    def _mismatch_message(self, batch_id: int, recorded: tuple[str, ...], now: tuple[str, ...],
                          state: BatchState) -> str:
        what = "committed" if state.complete else "decided"
        return (f"batch {batch_id}: Spark's checkpoint and the sink's commit log disagree about "
                f"what this batch reads. Spark planned batch {batch_id} with source offsets "
                f"{_show(now)} (offsets/{batch_id}), but the sink already {what} batch {batch_id} "
                f"reading {_show(recorded)}. The checkpoint was rolled back, partly deleted, "
                f"edited or copied from another query; writing this batch would duplicate or skip "
                f"records. {self._recovery_text()}")

    def _unrecorded_message(self, batch_id: int, now: tuple[str, ...] | None, newest: int) -> str:
        return (f"batch {batch_id}: Spark planned batch {batch_id} (source offsets "
                f"{_show(now) if now else 'unknown'}), but the sink's commit log has records of "
                f"later batches (up to {newest}) and none of batch {batch_id}: Spark's checkpoint "
                f"was rolled back, partly deleted or copied, and the sink cannot tell whether it "
                f"wrote this batch (its record was pruned, the log keeps the newest 100 batches, "
                f"or written by a txkafka version that recorded no batch without data). "
                f"{self._recovery_text()}")

    # -------------------------------------------------------------------- commit

    def commit(self, batch_id: int, results: Sequence[TaskResult | None]) -> CommitReport:
        started = time.monotonic()
        report = CommitReport(batch_id)
        self._check_batch_ids(batch_id, results)
        committables = [r.committable for r in results if r is not None and r.committable]
        listing = self.log.listing() if self.log else {}
        state = self.log.batch_state(batch_id, listing) if self.log else None
        if state is not None and state.pending is not None:
            self.recover()  # a decision stands whatever the checkpoint says now
            state = self.log.batch_state(batch_id) if self.log else None
        # Again at commit, before anything is decided or skipped: the checkpoint may have changed
        # since planning, and a mismatched re-run's transactions must not survive.
        offsets = self._check_source_offsets(batch_id, state, listing, rerun=committables)

        if state is not None and state.complete:
            # Invariant 3: the sink already committed this batch; whatever the re-run wrote goes.
            report.aborted = self._abort(committables)
            report.skipped = True
            report.orphans_aborted = self._sweep_after_commit(batch_id)
            count_aborts(self.log, batch_id, ABORTED, report.aborted + report.orphans_aborted)
            report.seconds = time.monotonic() - started
            self.last_report = report
            log.info("batch %d: already committed by the sink; the re-run's %d transaction(s) "
                     "aborted", batch_id, report.aborted)
            return report

        redo = state.redo_partitions if state is not None else frozenset()
        if state is not None and redo:
            self._check_layout(batch_id, state, results, committables)
            stray = [c for c in committables if c.partition_id not in redo]
            if stray:
                report.aborted += self._abort(stray)
                count_aborts(self.log, batch_id, ABORTED, report.aborted)
                committables = [c for c in committables if c.partition_id in redo]
            missing = sorted(redo - {c.partition_id for c in committables})
            if missing:
                self._abort(committables)
                lost = [c for c in state.last.lost if c.partition_id in missing]
                raise TransactionLostError(self._lost_message(batch_id, lost, rerun_failed=True))

        all_partitions = sorted({r.partition_id for r in results if r is not None})
        if not committables:
            if self.log is not None and state is None:
                # Every batch Spark ran through the sink is in the log, with what it read.
                self.log.write_empty(batch_id, offsets, all_partitions,
                                     extra=take_counts(self.log))
                if prune_due(batch_id, listing):
                    self.log.prune()
            report.orphans_aborted = (self._sweep_after_commit(batch_id)
                                      if self._needs_sweep(results) else 0)
            count_aborts(self.log, batch_id, ABORTED, report.orphans_aborted)
            report.seconds = time.monotonic() - started
            self.last_report = report
            return report

        committables = self._validate(batch_id, committables)
        self.faults.check("before_decision", batch=batch_id)
        round_no = (state.last.number + 1) if state is not None and state.rounds else 0
        if self.log is not None:
            try:
                self.log.write_decision(batch_id, round_no, committables, all_partitions,
                                        source_offsets=offsets, layout=_layout(results))
            except ConcurrentWriterError:
                self._abort(committables)  # ours: the other driver's decision stands alone
                raise
        self.faults.check("after_decision", batch=batch_id)
        decided = time.monotonic()
        self._end_round(batch_id, round_no, committables, recovering=False,
                        timings={"validate_and_decide_ms": round((decided - started) * 1000, 1)})
        self.faults.check("after_sink_commit", batch=batch_id)

        report.transactions = len(committables)
        report.records = sum(c.record_count for c in committables)
        report.orphans_aborted = self._sweep_after_commit(batch_id, keep={c.key for c in committables})
        count_aborts(self.log, batch_id, ABORTED, report.orphans_aborted)
        if self.log is not None and prune_due(batch_id, listing):
            self.log.prune()
        report.seconds = time.monotonic() - started
        self.last_report = report
        log.info("batch %d: committed %d transactions, %d records in %.3fs", batch_id,
                 report.transactions, report.records, report.seconds)
        return report

    def _check_layout(self, batch_id: int, state: BatchState, results: Sequence[TaskResult | None],
                      rerun: Sequence[KafkaCommittable]) -> None:
        """Invariant 12: a lost round is re-written only by the task layout that decided it."""
        lost_round = state.last
        then = lost_round.layout
        if then is None:
            # Decided before txkafka recorded layouts: compare what that record has.
            log.warning("batch %d round %d was decided before txkafka recorded task layouts: "
                        "only its task partitions and the lost ones' row counts are compared",
                        batch_id, lost_round.number)
            then = {p: PartitionInput(None) for p in lost_round.all_partitions}
            then.update({c.partition_id: PartitionInput(c.record_count) for c in lost_round.lost})
        now = _layout(results)
        problems = []
        if set(then) != set(now):
            problems.append(f"{len(then)} task partitions then ({_partition_list(then)}), "
                            f"{len(now)} now ({_partition_list(now)})")
        for p in sorted(set(then) & set(now)):
            diff = then[p].difference(now[p])
            if diff:
                problems.append(f"task partition {p}: {diff}")
        if not problems:
            return
        self._abort(rerun)
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8
                                           else "")
        raise TaskLayoutChangedError(
            f"batch {batch_id}: the broker aborted decided transactions of round "
            f"{lost_round.number} (task partitions {sorted(state.redo_partitions)}), and this "
            f"re-run, which must write exactly those again, has another task layout: {shown}. "
            f"Re-writing some task partitions of a different layout would lose or repeat "
            f"records, so nothing of this re-run is committed (its transactions are aborted). "
            f"Restart the query with the layout of the run that decided batch {batch_id}: the "
            f"reader's minPartitions and maxRecordsPerPartition as then, the same "
            f"repartition()/coalesce() in the query, spark.sql.shuffle.partitions as then (a "
            f"streaming query keeps it in its checkpoint), and no non-deterministic "
            f"transformation (rand(), uuid(), current_timestamp()) before the sink. Once batch "
            f"{batch_id} is complete, the layout may change. See docs/operations.md, "
            f"'Parallelism changed while a batch must be re-written'.",
        )

    def abort(self, batch_id: int, results: Sequence[TaskResult | None]) -> int:
        """Spark gave up on the batch. A decided round still commits; everything else is aborted.

        Transactions are compared by (id, producer id, epoch): ids are reused by every batch and
        round, so a redo round's transaction on an id that an older round decided is not decided.
        Once recovery has rolled a pending round forward nothing decided is still open, so the
        sweep spares only a round that is still pending (its outcome unknown or unfinished).
        """
        decided: set[Key] = set()
        pending: set[Key] = set()
        unresolved: Exception | None = None
        if self.log is not None:
            state = self.log.batch_state(batch_id)
            if state is not None and state.pending is not None:
                try:
                    self.recover()
                except (TxKafkaError, OSError) as e:
                    # The decision stands (recovery retries it); abort the rest, then re-raise.
                    unresolved = e
                try:
                    state = self.log.batch_state(batch_id)
                except (TxKafkaError, OSError):
                    if unresolved is None:
                        raise
                    # Recovery adds no decision: the one read above still names every decided
                    # transaction, which is what must never be aborted.
            if state is not None:
                decided = {c.key for r in state.rounds for c in r.decision}
                if state.pending is not None:
                    pending = {c.key for c in state.pending.decision}
        mine = [r.committable for r in results if r is not None and r.committable]
        n = self._abort([c for c in mine if c.key not in decided])
        count_aborts(self.log, batch_id, ABORTED, n)
        if unresolved is None:
            swept = self.sweep_orphans(keep=pending)
            count_aborts(self.log, batch_id, ABORTED, swept)
            return n + swept
        try:
            self.sweep_orphans(keep=pending)
        except Exception as e:  # noqa: BLE001 - the unresolved round is the error to report
            log.warning("batch %d: orphan sweep failed (the next batch sweeps): %s", batch_id, e)
        raise unresolved

    # ---------------------------------------------------------------- internals

    def _check_batch_ids(self, batch_id: int, results: Sequence[TaskResult | None]) -> None:
        """Refuse results that tasks wrote under another batch id: their should_write() decision
        was taken for the wrong batch, so rows may be missing. Nothing is decided; they are aborted."""
        wrong = [r for r in results if r is not None and r.batch_id != batch_id]
        if not wrong:
            return
        decided: set[Key] = set()
        state = self.log.batch_state(batch_id) if self.log else None
        if state is not None:
            decided = {c.key for r in state.rounds for c in r.decision}
        self._abort(r.committable for r in wrong
                    if r.committable is not None and r.committable.key not in decided)
        shown = ", ".join(f"task partition {r.partition_id} attempt {r.attempt}: batch {r.batch_id}"
                          for r in wrong[:5])
        raise TransactionError(
            f"batch {batch_id}: {len(wrong)} task result(s) carry another batch id ({shown}). "
            f"Spark did not give those tasks this batch's id (local property "
            f"streaming.sql.batchId), so they may have skipped rows. Their transactions are "
            f"aborted and nothing is decided: the batch fails and re-runs on restart. If this "
            f"repeats, report it with the Spark version."
        )

    def _sweep_after_commit(self, batch_id: int, keep: Iterable[Key] = ()) -> int:
        """The batch's outcome is durable: a failed sweep must not fail it. The next batch sweeps."""
        try:
            return self.sweep_orphans(keep=keep)
        except Exception as e:  # noqa: BLE001 - best effort by design
            log.warning("batch %d is committed, but the orphan sweep failed (the next batch sweeps "
                        "again; open orphans hold read_committed readers until then or until "
                        "their transaction timeout): %s", batch_id, e)
            return 0

    @staticmethod
    def _needs_sweep(results: Sequence[TaskResult | None]) -> bool:
        return any(r is None or r.attempt > 0 for r in results)

    def _time_left_ms(self, d: TransactionDescription) -> float | None:
        """Time until the coordinator aborts ``d`` (None: it has no start time). Its start is on
        the coordinator's clock, now on the driver's: a driver clock ahead would make every
        transaction look older, up to "no time left" at every batch. No transaction of this batch
        is older than the batch (``planned_at``), so that bounds its age."""
        if d.start_time_ms < 0:
            return None
        age_ms = time.time() * 1000 - d.start_time_ms
        if self.planned_at is not None:
            batch_age_ms = (host_clock() - self.planned_at) * 1000
            if age_ms > batch_age_ms:
                if age_ms - batch_age_ms > 5000 and not _SKEW_WARNED.is_set():
                    _SKEW_WARNED.set()
                    log.warning(
                        "the driver's clock is at least %.0f s ahead of the transaction "
                        "coordinator's (transaction %s started %.0f s ago by the driver's clock, "
                        "its batch %.0f s ago): txkafka takes a transaction's age from its batch; "
                        "synchronise the clocks (NTP)", (age_ms - batch_age_ms) / 1000,
                        d.transactional_id, age_ms / 1000, batch_age_ms / 1000)
                age_ms = batch_age_ms
        return d.timeout_ms - age_ms

    def _validate(self, batch_id: int, committables: list[KafkaCommittable]) -> list[KafkaCommittable]:
        """Invariant 7: every transaction is open, ours, and not about to time out."""
        descs = self.client.describe(c.transactional_id for c in committables)
        # A broker that was frozen and resumes may still answer as the coordinator it was, from
        # its stale state, until its metadata catches up: an id not Ongoing at this producer and
        # epoch is asked again at the coordinator FindCoordinator names now, before it counts.
        for wait_s in _REASK_WAITS_S:
            unsettled = [c.transactional_id for c in committables
                         if _not_open_as_reported(descs.get(c.transactional_id), c)]
            if not unsettled:
                break
            log.info("batch %d: %d transaction(s) not seen open as their tasks reported (%s); "
                     "asking their coordinators again in %.0fs", batch_id, len(unsettled),
                     ", ".join(unsettled[:3]), wait_s)
            time.sleep(wait_s)
            descs.update(self.client.describe(unsettled, fresh=True))
        margin_ms = max(2000.0, 0.05 * self.cfg.transaction_timeout_ms)
        problems = []
        checked = []
        for c in committables:
            d = descs.get(c.transactional_id)
            why = _not_open_as_reported(d, c)
            if why:
                problems.append(why)
            elif (left_ms := self._time_left_ms(d)) is not None and left_ms < margin_ms:
                problems.append(
                    f"{c.transactional_id}: {max(0, left_ms / 1000):.1f}s left "
                    f"of its {d.timeout_ms / 1000:.0f}s timeout; raise kafka.transaction.timeout.ms"
                )
            else:
                parts = {t: sorted(ps) for t, ps in d.partitions.items()} or c.topic_partitions
                checked.append(KafkaCommittable(**{**c.to_json(), "topic_partitions": parts,
                                                   "start_time_ms": d.start_time_ms}))
        if problems:
            self._abort(committables)
            raise TransactionError(
                f"batch {batch_id}: {len(problems)} of {len(committables)} transactions cannot be "
                f"committed, so none is; the batch fails and re-runs on restart: "
                + "; ".join(problems)
            )
        return checked

    def _end_round(self, batch_id: int, round_no: int, decision: list[KafkaCommittable],
                   *, recovering: bool, timings: dict[str, float] | None = None) -> None:
        started = time.monotonic()
        codes: dict[str, int] = {}
        rest = list(decision)
        if self.faults.armed and len(rest) > 1:
            first = rest.pop(0)
            codes.update(self.client.end_many([first.key], commit=True))
            self.faults.check("during_recovery" if recovering else "between_endtxn", batch=batch_id)
        codes.update(self.client.end_many([c.key for c in rest], commit=True,
                                          parallelism=self.cfg.commit_parallelism))
        committed = [c for c in decision if codes.get(c.transactional_id) == 0]
        fenced = [c for c in decision if codes.get(c.transactional_id) in _LOST_CODES]
        no_id = [c for c in decision if codes.get(c.transactional_id) in UNKNOWN_ID_CODES]
        unfinished = [c for c in decision
                      if c not in committed and c not in fenced and c not in no_id]
        lost, unconfirmed, undescribed, seen = self._confirm_lost(fenced, codes)
        unfinished += undescribed
        no_id += unconfirmed
        if self.log is None and (unfinished or lost):
            # A batch write keeps no decision: nothing completes or redoes it later, and Spark's
            # abort() that follows aborts whatever did not commit. Say so (never "restart").
            raise (TransactionLostError if lost and not unfinished else TransactionError)(
                self._partial_batch_write_message(committed, lost + unfinished, codes))
        if unfinished:
            raise TransactionError(
                f"batch {batch_id}: the commit of {len(unfinished)} decided transactions did not "
                f"finish ({', '.join(f'{c.transactional_id}: {error_name(codes.get(c.transactional_id, -1))}' for c in unfinished[:5])}); "
                "the decision stands and the next attempt (or restart) completes it"
            )
        if no_id:
            # Kafka cannot tell these (a forgotten id, an unconfirmed fenced answer): an earlier
            # attempt's commit may or may not have landed. Use what an earlier attempt learnt or
            # the operator decided; else stop.
            note = self.log.read_unresolved(batch_id, round_no) if self.log is not None else None
            verdicts = known_verdicts(note)
            committed += [c for c in no_id if verdicts.get(c.transactional_id) == "committed"]
            lost += [c for c in no_id if verdicts.get(c.transactional_id) == "lost"]
            no_id = [c for c in no_id if c.transactional_id not in verdicts]
        if no_id:
            self._stop_unknown(batch_id, round_no, committed, lost, no_id, codes, seen)
        if self.log is not None:
            self.log.write_outcome(batch_id, round_no, committed, lost, extra={
                **(timings or {}), "end_txn_ms": round((time.monotonic() - started) * 1000, 1),
                "recovered": recovering, **take_counts(self.log)})
        if lost:
            raise TransactionLostError(self._lost_message(batch_id, lost, rerun_failed=False))

    def _confirm_lost(self, fenced: list[KafkaCommittable], codes: dict[str, int]) -> tuple[
            list[KafkaCommittable], list[KafkaCommittable], list[KafkaCommittable],
            dict[str, TransactionDescription]]:
        """Invariant 15: a fenced EndTxn(commit) answer is taken as "lost" only if
        DescribeTransactions shows the coordinator's own abort of exactly this transaction.

        The coordinator's timeout abort moves the id to epoch e+1 in PrepareAbort/CompleteAbort
        (same producer id), keeping the transaction's start time; an abort at epoch e answers a
        commit with INVALID_TXN_STATE. Anything else (an Empty id at e+1 after a commit landed and
        a zombie re-initialised the id; that zombie's own transaction at e+1, aborted: another
        start time; a newer epoch; another producer id) does not prove the commit failed.
        Returns (lost, unconfirmed, not described: retry later, descriptions).
        """
        if not fenced:
            return [], [], [], {}
        try:
            descs = self.client.describe(c.transactional_id for c in fenced)
        except (TxKafkaError, OSError) as e:
            log.warning("cannot confirm with DescribeTransactions that %d fenced transaction(s) "
                        "did not commit (the decision stands; the next attempt asks again): %s",
                        len(fenced), e)
            return [], [], list(fenced), {}
        lost, unconfirmed = [], []
        for c in fenced:
            d = descs.get(c.transactional_id)
            aborted_by_coordinator = (
                d is not None and not d.error_code and d.producer_id == c.producer_id
                and d.state in _ABORT_STATES
                and (c.start_time_ms < 0 or d.start_time_ms == c.start_time_ms)
                and (d.producer_epoch == c.producer_epoch + 1
                     or (codes.get(c.transactional_id) == INVALID_TXN_STATE
                         and d.producer_epoch == c.producer_epoch)))
            (lost if aborted_by_coordinator else unconfirmed).append(c)
        return lost, unconfirmed, [], descs

    def _stop_unknown(self, batch_id: int, round_no: int, committed: list[KafkaCommittable],
                      lost: list[KafkaCommittable], unknown: list[KafkaCommittable],
                      codes: dict[str, int],
                      seen: dict[str, TransactionDescription] | None = None) -> NoReturn:
        """Invariant 8 for an unknowable outcome: record what is known, write no outcome, stop."""

        if self.log is not None:
            previous = self.log.read_unresolved(batch_id, round_no) or {}
            self.log.write_unresolved(batch_id, round_no, {
                "batch_id": batch_id,
                "round": round_no,
                "updated_ms": int(time.time() * 1000),
                "committed": sorted(c.transactional_id for c in committed),
                "lost": sorted(c.transactional_id for c in lost),
                "unknown": {c.transactional_id: error_name(codes[c.transactional_id])
                            for c in unknown},
                "resolved": previous.get("resolved") or {},
            })
        seen = seen or {}

        def now(c: KafkaCommittable) -> str:
            d = seen.get(c.transactional_id)
            if d is None:
                return ""
            return (f"; DescribeTransactions now shows producer id {d.producer_id}, epoch "
                    f"{d.producer_epoch}, state {d.state}")

        parts = "; ".join(
            f"task partition {c.partition_id}: transaction {c.transactional_id} (producer id "
            f"{c.producer_id}, epoch {c.producer_epoch}; {c.record_count} records to "
            f"{c.describe_partitions() or 'unknown partitions'}; EndTxn answered "
            f"{error_name(codes[c.transactional_id])}{now(c)})"
            for c in unknown
        )
        reasons = []
        if any(codes[c.transactional_id] in UNKNOWN_ID_CODES for c in unknown):
            reasons.append(
                "the transaction coordinator no longer knows a transactional id (ids expire after "
                "the broker's transactional.id.expiration.ms, 7 days by default, e.g. while the "
                "query was down after a crash between the commit and its record)")
        if any(codes[c.transactional_id] in _LOST_CODES for c in unknown):
            reasons.append(
                "the coordinator answered as if the transaction were fenced or aborted, but "
                "DescribeTransactions does not show its own abort of exactly this transaction "
                "(producer id unchanged, epoch one higher, the same start time, "
                "PrepareAbort/CompleteAbort): another producer with the same id (a zombie task "
                "attempt) may have re-initialised it after the commit landed")
        offsets = self.log.spark_source_offsets(batch_id) if self.log else None
        where = f" The batch read source offsets {offsets}." if offsets else ""
        known = (f" Of the round's other transactions, {len(committed)} committed and {len(lost)} "
                 f"were aborted by the broker." if committed or lost
                 else "")
        if self.log is None:
            todo = ("Check whether these records are in the output; a batch write has no log to "
                    "record the answer in, so re-run the write only if they are missing.")
        else:
            ck = redact_uri(self.log.location)  # an s3:// URI may carry credentials
            todo = (f"The query stops until you decide. Check whether these records are in the "
                    f"output (for example with `txkafka verify`, or by reading those partitions "
                    f"with isolation.level=read_committed), then record the answer: "
                    f"`txkafka commit-log resolve --checkpoint {ck} --batch {batch_id} --committed` "
                    f"if they are there (nothing is written again), or `... --lost` if they are "
                    f"missing (the restart writes exactly these task partitions again); add "
                    f"--transactional-id ID to answer per transaction, --yes to apply. Then "
                    f"restart the query.")
        raise TransactionOutcomeUnknownError(
            f"batch {batch_id} round {round_no}: the outcome of {len(unknown)} decided "
            f"transaction(s) is unknown: {'; and '.join(reasons)}; so Kafka cannot say whether "
            f"their commit landed: {parts}.{known}"
            f"{where} txkafka records no outcome: marking them lost could duplicate these "
            f"records, marking them committed could lose them. {todo}"
        )

    @staticmethod
    def _partial_batch_write_message(committed: list[KafkaCommittable],
                                     failed: list[KafkaCommittable], codes: dict[str, int]) -> str:

        def parts(cs: list[KafkaCommittable]) -> str:
            return "; ".join(
                f"task partition {c.partition_id} ({c.record_count} records to "
                f"{c.describe_partitions() or 'unknown partitions'}, transaction "
                f"{c.transactional_id}: {error_name(codes.get(c.transactional_id, -1))})"
                for c in cs) or "none"

        return (f"batch write: the commit of {len(failed)} of {len(committed) + len(failed)} "
                f"transactions did not land, so the write is partly committed. Committed: "
                f"{len(committed)} transaction(s), {sum(c.record_count for c in committed)} records. "
                f"Not committed (aborted now, or by the broker's transaction timeout): "
                f"{parts(failed)}. A batch write keeps no decision log, so nothing completes or "
                f"redoes it: re-running the whole write duplicates the committed partitions. Use a "
                f"streaming query (Trigger.AvailableNow) for a write that recovers exactly once.")

    def _lost_message(self, batch_id: int, lost: list[KafkaCommittable], rerun_failed: bool) -> str:
        parts = "; ".join(
            f"task partition {c.partition_id} ({c.record_count} records to "
            f"{c.describe_partitions() or 'unknown partitions'}, transaction {c.transactional_id})"
            for c in lost
        )
        offsets = self.log.spark_source_offsets(batch_id) if self.log else None
        where = f"; the batch read source offsets {offsets}" if offsets else ""
        if rerun_failed:
            return (f"batch {batch_id}: the broker aborted decided transactions ({parts}) and the "
                    f"re-run produced no records for them{where}. The input of this batch is no "
                    f"longer reproducible; txkafka stops instead of losing these records silently.")
        return (f"batch {batch_id}: the broker aborted {len(lost)} decided transaction(s) before "
                f"their commit landed (transaction timeout or fencing): {parts}{where}. Nothing "
                f"else of the batch is affected. Restart the query: txkafka re-runs exactly these "
                f"task partitions of batch {batch_id}. Consider raising kafka.transaction.timeout.ms.")

    def _abort(self, committables: Iterable[KafkaCommittable]) -> int:
        items = [c.key for c in committables]
        if not items:
            return 0
        codes = self.client.end_many(items, commit=False, parallelism=self.cfg.commit_parallelism)
        return sum(1 for code in codes.values() if code == NONE)

    def sweep_orphans(self, keep: Iterable[Key] = ()) -> int:
        """Invariant 6: abort every open transaction of this sink that no decision covers.

        ``keep`` names transactions as (id, producer id, epoch): ids are reused, so an open
        transaction on a kept id but at another producer id or epoch is an orphan all the same.
        """
        keep = set(keep)
        listed = self.client.list_transactions(prefix=self.ids.sink_prefix, states=["Ongoing"])
        ours = [t.transactional_id for t in listed if self.ids.owns(t.transactional_id)]
        if not ours:
            return 0
        descs = self.client.describe(ours)
        targets = [(d.transactional_id, d.producer_id, d.producer_epoch) for d in descs.values()
                   if d.state == "Ongoing"
                   and (d.transactional_id, d.producer_id, d.producer_epoch) not in keep]
        if not targets:
            return 0
        codes = self.client.end_many(targets, commit=False, parallelism=self.cfg.commit_parallelism)
        aborted = sum(1 for c in codes.values() if c == 0)
        if aborted:
            log.warning("aborted %d orphan transaction(s) of sink %s", aborted, self.ids.sink_prefix)
        return aborted
