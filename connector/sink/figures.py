"""The sink's figures per batch, read from its own commit log (never from log text).

Most figures are facts of a batch's records: transactions committed (by the batch's commit or
rolled forward by a later run), lost (aborted by the broker before the commit landed), re-written
(a later round of the batch), records and bytes committed, the commit time (from the decision to
the last EndTxn answer). Aborts happen also after a batch's outcome is written (the orphan sweep
after the commit, the follow-up sweeps of late attempts, a failed batch, the re-run of a committed
one): the driver process counts them here and the sink's next record (outcome or empty batch)
carries the counts since its previous one, as ``swept``. So they belong to the batch whose record
carries them, and a driver that stops loses the counts it had not recorded yet.

Fields added to records only (connector/formats.py: older readers ignore them, no format bump).
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

from .commit_log import BatchState, SinkCommitLog

ABORTED = "aborted"        # ended by the sink: a failed batch, a re-run, orphans after a commit
LATE_SWEPT = "late_swept"  # late attempts' transactions ended by the follow-up sweeps

_COUNTS: dict[str, dict[str, int]] = {}
_COUNTS_LOCK = threading.Lock()


def count_aborts(log: SinkCommitLog | None, kind: str, n: int) -> None:
    """Count ``n`` transactions of the sink under ``log`` ended as ``kind``, for its next record."""
    if log is None or n <= 0:
        return
    with _COUNTS_LOCK:
        counts = _COUNTS.setdefault(log.root, {})
        counts[kind] = counts.get(kind, 0) + n


def take_counts(log: SinkCommitLog | None) -> dict[str, Any]:
    """The counts since the sink's previous record, as the record's extra fields (reset)."""
    if log is None:
        return {}
    with _COUNTS_LOCK:
        counts = _COUNTS.pop(log.root, None)
    return {"swept": counts} if counts else {}


@dataclass(frozen=True)
class BatchFigures:
    batch_id: int
    status: str                     # complete | empty | decided | lost | unresolved
    completed_ms: int | None        # wall clock of the batch's last outcome
    committed: int = 0              # transactions committed, every round
    rolled_forward: int = 0         # of those, committed by a later run (recovery)
    lost: int = 0                   # decided transactions the broker aborted first
    rewritten: int = 0              # transactions of re-written rounds (round > 0)
    aborted: int = 0                # ended by the sink (see the module's docstring)
    late_swept: int = 0             # late attempts ended by the follow-up sweeps
    records: int = 0                # records committed
    bytes: int | None = 0           # key and value bytes committed (None: not counted)
    commit_ms: float | None = None  # decision to last EndTxn answer, the slowest round

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def batch_figures(log: SinkCommitLog, state: BatchState) -> BatchFigures:
    """The figures of one batch from its records."""
    committed = rolled = lost = rewritten = records = aborted = late = 0
    size: int | None = 0
    commit_ms: float | None = None
    for rnd in state.rounds:
        out = rnd.outcome or {}
        swept = out.get("swept") or {}
        aborted += int(swept.get(ABORTED, 0))
        late += int(swept.get(LATE_SWEPT, 0))
        if rnd.empty:
            continue
        if rnd.number > 0:
            rewritten += len(rnd.decision)
        if rnd.outcome is None:
            continue
        n = len(out.get("committed", []))
        committed += n
        rolled += n if out.get("recovered") else 0
        lost += len(out.get("lost", []))
        records += int(out.get("records", 0))
        size = None if size is None or out.get("bytes") is None else size + int(out["bytes"])
        if out.get("end_txn_ms") is not None and not out.get("recovered"):
            commit_ms = max(commit_ms or 0.0, float(out["end_txn_ms"]))
    last = state.last.outcome or {}
    return BatchFigures(state.batch_id, _status(log, state), last.get("completed_ms"), committed,
                        rolled, lost, rewritten, aborted, late, records, size, commit_ms)


def _status(log: SinkCommitLog, state: BatchState) -> str:
    if state.empty:
        return "empty"
    if state.complete:
        return "complete"
    if state.pending is None:
        return "lost"  # the re-run writes the lost task partitions
    if log.read_unresolved(state.batch_id, state.pending.number) is not None:
        return "unresolved"
    return "decided"


class FiguresReader:
    """The sink's newest figures, reading each finished batch's records once (a listener calls
    this per progress event: one listing of the log, and only new or unfinished batches read)."""

    def __init__(self, log: SinkCommitLog, keep: int = 20) -> None:
        self.log = log
        self.keep = keep
        self._done: dict[int, BatchFigures] = {}

    def newest(self, last: int | None = None) -> list[BatchFigures]:
        """The newest ``last`` batches' figures (default: ``keep``), oldest first."""
        listing = self.log.listing()
        wanted = sorted(listing)[-(last or self.keep):]
        out = []
        for b in wanted:
            fig = self._done.get(b)
            if fig is None:
                state = self.log.batch_state(b, listing)
                if state is None:
                    continue
                fig = batch_figures(self.log, state)
                if fig.status in ("complete", "empty"):
                    self._done[b] = fig
            out.append(fig)
        for b in [b for b in self._done if b not in listing]:
            del self._done[b]  # pruned
        return out
