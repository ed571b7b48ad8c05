"""Follow-up sweeps: abort transactions that a late task attempt opens after its batch's sweep.

Why: Spark gives no callback when a losing, speculative, killed or zombie attempt finally writes.
Such an attempt can open its transaction after the batch committed and after the commit's orphan
sweep; if no later batch writes (AvailableNow's last batch, ``df.write``, an idle stream) nothing
would abort it before the broker's transaction timeout, and read_committed readers of its
partitions stall meanwhile (invariant 13). Tasks check the commit log themselves (task_writer);
these sweeps catch what they cannot (a process killed between its first produce and its check).

They run in the driver-side process where ``commit()``/``abort()`` run (Spark reuses it between
batches and ends it after about a minute idle: the sweeps end with it, and the broker's timeout
remains the bound), in one daemon thread per sink: every ``FAST_INTERVAL_S`` for ``FAST_PERIOD_S``
after each commit or abort, then every ``SLOW_INTERVAL_S`` until about the transaction timeout,
after which the broker aborts anything left. A new commit restarts the schedule.

One sweep, in this order (which makes it race-free):
  (a) list the sink's Ongoing transactions and describe them: (id, producer id, epoch);
  (b) THEN read the newest completed batch M from Spark's ``commits/`` and the sink's log; the
      running batch is M+1;
  (c) abort exactly the listed triples whose id's batch parity is not (M+1) % 2 and that no
      decided round without an outcome covers; ids of the older shape (no parity) always.
Batch M+2 (M's parity) starts only after Spark wrote ``commits/M+1``, i.e. after (b), so no
triple listed in (a) is M+2's; and an EndTxn(abort) at an old epoch cannot end a newer epoch's
transaction on the same id. A batch write (no log) has no next batch: once its commit or abort
returned, every open transaction under its own prefix is undecided and aborted.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from .commit_log import SinkCommitLog
from .figures import LATE_SWEPT, count_aborts
from ..client.transactions import TransactionClient
from .transactional_ids import TransactionalIdFactory

log = logging.getLogger(__name__)

Key = tuple[str, int, int]  # (transactional id, producer id, epoch)

FAST_INTERVAL_S = 2.0
FAST_PERIOD_S = 20.0
SLOW_INTERVAL_S = 5.0  # within the 10 s that invariant 13 is measured against


# ----------------------------------------------------------------------------- decision rule

@dataclass(frozen=True)
class LogProgress:
    """What the checkpoint says, read after the listing: the newest completed batch and the
    transactions of decided rounds that have no outcome yet (never aborted)."""

    newest_complete: int | None
    pending: frozenset[Key] = frozenset()

    @property
    def running_parity(self) -> int | None:
        """Parity of the only batch that may still be writing, None before any batch completed."""
        return None if self.newest_complete is None else (self.newest_complete + 1) % 2


def late_transactions(open_txns: Iterable[Key], ids: TransactionalIdFactory,
                      progress: LogProgress) -> list[Key]:
    """The listed transactions a sweep aborts (step (c)); ``progress`` must be read after the
    listing. Ids of another sink are never touched. Before any batch completed, the running
    batch is unknown (a checkpoint whose ``commits/`` was removed can re-run any batch), so only
    ids of the older shape (no parity) are late then."""
    out = []
    running = progress.running_parity
    for key in open_txns:
        if key in progress.pending:
            continue
        parts = ids.parse(key[0])
        if parts is None:
            continue
        if parts.parity < 0 or (running is not None and parts.parity != running):
            out.append(key)
    return out


def read_progress(commit_log: SinkCommitLog) -> LogProgress:
    """Step (b): M = max(Spark's newest ``commits/N``, the sink log's newest complete batch), and
    every decided round without an outcome (a batch whose last round has one but lost partitions
    is not complete: Spark re-runs it, so its redo round is the running batch)."""
    spark_newest = commit_log.spark.latest_committed_batch()
    listing = commit_log.listing()
    pending: set[Key] = set()
    sink_newest: int | None = None
    for batch in sorted(listing, reverse=True):
        rounds = listing[batch]
        if not {"outcome", "empty"} & rounds[max(rounds)]:
            state = commit_log.batch_state(batch, listing)
            if state is not None and state.pending is not None:
                pending.update(c.key for c in state.pending.decision)
        elif sink_newest is None:
            state = commit_log.batch_state(batch, listing)
            if state is not None and state.complete:
                sink_newest = batch
    newest = max((b for b in (spark_newest, sink_newest) if b is not None), default=None)
    return LogProgress(newest, frozenset(pending))


def sweep_once(client: TransactionClient, ids: TransactionalIdFactory,
               commit_log: SinkCommitLog | None) -> list[Key]:
    """One follow-up sweep; returns the transactions it aborted. One ListTransactions round
    when nothing of the sink is open."""
    listed = client.list_transactions(prefix=ids.sink_prefix, states=["Ongoing"])
    ours = [t.transactional_id for t in listed if ids.owns(t.transactional_id)]
    if not ours:
        return []
    descs = client.describe(ours)
    open_txns = [(d.transactional_id, d.producer_id, d.producer_epoch) for d in descs.values()
                 if d.state == "Ongoing"]
    if not open_txns:
        return []
    progress: LogProgress | None = None
    if commit_log is None:
        targets = open_txns  # a batch write's own prefix: nothing open is decided any more
    else:
        progress = read_progress(commit_log)
        targets = late_transactions(open_txns, ids, progress)
    if not targets:
        return []
    codes = client.end_many(targets, commit=False)
    aborted = [t for t in targets if codes.get(t[0]) == 0]
    if progress is not None:
        # (the sink's figures: these ended after the newest complete batch)
        count_aborts(commit_log, progress.newest_complete or 0, LATE_SWEPT, len(aborted))
    if aborted:
        log.warning("aborted %d late transaction(s) of sink %s that no decision covers (task "
                    "attempts that wrote after their batch was decided): %s", len(aborted),
                    ids.sink_prefix, ", ".join(f"{t[0]} (producer {t[1]}, epoch {t[2]})"
                                               for t in aborted[:10]))
    return aborted


# ----------------------------------------------------------------------------- schedule

def sweep_offsets(horizon_s: float, fast_interval_s: float = FAST_INTERVAL_S,
                  fast_period_s: float = FAST_PERIOD_S,
                  slow_interval_s: float = SLOW_INTERVAL_S) -> list[float]:
    """Seconds after a commit at which to sweep: dense first (late attempts usually finish within
    a few seconds of their batch), then sparse until ``horizon_s`` (the transaction timeout,
    after which the broker aborts whatever is left)."""
    out: list[float] = []
    t = fast_interval_s
    while t <= min(fast_period_s, horizon_s) + 1e-9:
        out.append(round(t, 6))
        t += fast_interval_s
    t = (out[-1] if out else 0.0) + slow_interval_s
    while t <= horizon_s + 1e-9:
        out.append(round(t, 6))
        t += slow_interval_s
    return out


class FollowUpSweeps:
    """One sink's follow-up sweeps in this process: a daemon thread that lives only while a
    schedule runs. ``restart`` (after each commit or abort) starts the schedule again."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._sweep: Callable[[], object] | None = None
        self._offsets: list[float] = []
        self._start = 0.0
        self._done = 0
        self._warned = False
        self.sweeps = 0  # sweeps run since this object was created (tests, diagnostics)

    def restart(self, sweep: Callable[[], object], offsets: list[float]) -> None:
        with self._cond:
            self._sweep = sweep
            self._offsets = list(offsets)
            self._start = time.monotonic()
            self._done = 0
            self._warned = False
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"txkafka-late-sweeps-{self.name}")
                self._thread.start()

    @property
    def active(self) -> bool:
        with self._cond:
            return self._thread is not None

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._done >= len(self._offsets):
                        self._thread = None  # restart() starts a new thread
                        return
                    wait = self._start + self._offsets[self._done] - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)  # a restart() wakes it to recompute
                # One sweep for every time that passed (a slow sweep, e.g. while a broker is
                # down, must not be followed by a burst of them).
                elapsed = time.monotonic() - self._start
                while self._done < len(self._offsets) and self._offsets[self._done] <= elapsed:
                    self._done += 1
                sweep = self._sweep
            self._run_one(sweep)

    def _run_one(self, sweep: Callable[[], object] | None) -> None:
        try:
            if sweep is not None:
                sweep()
        except Exception as e:  # noqa: BLE001 - a background sweep never raises
            # Said once per schedule: the next sweep, the next batch's commit sweep and, at
            # worst, the broker's transaction timeout still end what stays open.
            with self._cond:
                first, self._warned = not self._warned, True
            (log.warning if first else log.debug)(
                "follow-up sweep of %s failed (retried at the next one): %s", self.name, e)
        finally:
            with self._cond:
                self.sweeps += 1


_SWEEPERS: dict[str, FollowUpSweeps] = {}
_SWEEPERS_LOCK = threading.Lock()


def follow_up(client: TransactionClient, ids: TransactionalIdFactory,
              commit_log: SinkCommitLog | None, transaction_timeout_ms: int) -> FollowUpSweeps:
    """(Re)start the follow-up sweeps of one sink after its ``commit()`` or ``abort()``.

    Sweepers of other sinks whose schedule ended are dropped: every batch write is a sink of its
    own (``df.write`` in ``foreachBatch``: one per micro-batch), so the process keeps those that
    sweep, not one per write. Looked up and restarted under the lock: a dropped sweeper is never
    restarted."""
    key = f"{ids.sink_prefix}|{commit_log.location if commit_log is not None else ''}"
    with _SWEEPERS_LOCK:
        for other in [k for k, s in _SWEEPERS.items() if k != key and not s.active]:
            del _SWEEPERS[other]
        sweeper = _SWEEPERS.get(key)
        if sweeper is None:
            sweeper = _SWEEPERS[key] = FollowUpSweeps(ids.sink_prefix.rstrip("-"))
        sweeper.restart(lambda: sweep_once(client, ids, commit_log),
                        sweep_offsets(transaction_timeout_ms / 1000.0))
    return sweeper
