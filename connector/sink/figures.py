"""The sink's figures per batch, read from its own commit log (never from log text).

Most figures are facts of a batch's records: transactions committed (by the batch's commit or
rolled forward by a later run), lost (aborted by the broker before the commit landed), re-written
(a later round of the batch), records and bytes committed, the commit time (from the decision to
the last EndTxn answer). Aborts happen also after a batch's outcome is written (the orphan sweep
after the commit, the follow-up sweeps of late attempts, a failed batch, the re-run of a committed
one): the driver process counts them here, per batch they followed, and the sink's next record
(outcome or empty batch) carries the counts since its previous one, as ``swept``
(``{"<batch>": {"aborted": n, "late_swept": m}}``). A batch's figures add what later records
carry for it; a driver that stops loses the counts it had not recorded yet.

Fields added to records only (connector/formats.py: older readers ignore them, no format bump).
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .commit_log import BatchState, SinkCommitLog

ABORTED = "aborted"        # ended by the sink: a failed batch, a re-run, orphans after a commit
LATE_SWEPT = "late_swept"  # late attempts' transactions ended by the follow-up sweeps

Swept = dict[int, dict[str, int]]  # batch -> kind -> transactions

_COUNTS: dict[str, Swept] = {}
_COUNTS_LOCK = threading.Lock()


def count_aborts(log: SinkCommitLog | None, batch_id: int, kind: str, n: int) -> None:
    """Count ``n`` transactions of the sink under ``log`` ended as ``kind`` after (or for)
    ``batch_id``, for the sink's next record."""
    if log is None or n <= 0:
        return
    with _COUNTS_LOCK:
        counts = _COUNTS.setdefault(log.root, {}).setdefault(batch_id, {})
        counts[kind] = counts.get(kind, 0) + n


def take_counts(log: SinkCommitLog | None) -> dict[str, Any]:
    """The counts since the sink's previous record, as the record's extra fields (reset)."""
    if log is None:
        return {}
    with _COUNTS_LOCK:
        counts = _COUNTS.pop(log.root, None)
    if not counts:
        return {}
    return {"swept": {str(b): dict(kinds) for b, kinds in sorted(counts.items())}}


def swept_in(outcome: dict[str, Any] | None) -> Swept:
    """The counts a record carries, by the batch they belong to (malformed entries skipped)."""
    raw = (outcome or {}).get("swept")
    out: Swept = {}
    if isinstance(raw, dict):
        for b, kinds in raw.items():
            if isinstance(kinds, dict) and str(b).isdigit():
                out[int(b)] = {k: int(v) for k, v in kinds.items()
                               if k in (ABORTED, LATE_SWEPT) and isinstance(v, int)}
    return out


@dataclass(frozen=True)
class BatchFigures:
    batch_id: int
    status: str                     # complete | empty | decided | lost | unresolved
    completed_ms: int | None        # wall clock of the batch's last outcome
    committed: int = 0              # transactions committed, every round
    rolled_forward: int = 0         # of those, committed by a later run (recovery)
    lost: int = 0                   # decided transactions the broker aborted first
    rewritten: int = 0              # transactions of re-written rounds (round > 0)
    aborted: int = 0                # ended by the sink after or for it (module docstring)
    late_swept: int = 0             # late attempts ended by the follow-up sweeps after it
    records: int = 0                # records committed
    bytes: int | None = 0           # key and value bytes committed (None: not counted)
    commit_ms: float | None = None  # decision to last EndTxn answer, the slowest round
    # What this batch's records carry for any batch (counted once each by a listener's totals).
    carried: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["carried"]
        return out


def batch_figures(log: SinkCommitLog, state: BatchState) -> tuple[BatchFigures, Swept]:
    """The figures of one batch from its own records (``aborted`` and ``late_swept`` are what
    later records carry for it: 0 here), and the counts its records carry, by batch."""
    committed = rolled = lost = rewritten = records = 0
    size: int | None = 0
    commit_ms: float | None = None
    swept: Swept = {}
    for rnd in state.rounds:
        out = rnd.outcome or {}
        for b, kinds in swept_in(out).items():
            into = swept.setdefault(b, {})
            for k, n in kinds.items():
                into[k] = into.get(k, 0) + n
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
    carried = {k: sum(kinds.get(k, 0) for kinds in swept.values()) for k in (ABORTED, LATE_SWEPT)}
    last = state.last.outcome or {}
    fig = BatchFigures(state.batch_id, _status(log, state), last.get("completed_ms"), committed,
                       rolled, lost, rewritten, 0, 0, records, size, commit_ms, carried)
    return fig, swept


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
        self._done: dict[int, tuple[BatchFigures, Swept]] = {}

    def newest(self, last: int | None = None) -> list[BatchFigures]:
        """The newest ``last`` batches' figures (default: ``keep``), oldest first, each with the
        aborts that records up to the newest carry for it."""
        listing = self.log.listing()
        wanted = sorted(listing)[-(last or self.keep):]
        read: list[tuple[BatchFigures, Swept]] = []
        for b in wanted:
            got = self._done.get(b)
            if got is None:
                state = self.log.batch_state(b, listing)
                if state is None:
                    continue
                got = batch_figures(self.log, state)
                if got[0].status in ("complete", "empty"):
                    self._done[b] = got
            read.append(got)
        for b in [b for b in self._done if b not in listing]:
            del self._done[b]  # pruned
        after: Swept = {}
        for _fig, swept in read:
            for b, kinds in swept.items():
                into = after.setdefault(b, {})
                for k, n in kinds.items():
                    into[k] = into.get(k, 0) + n
        return [replace(fig, aborted=after.get(fig.batch_id, {}).get(ABORTED, 0),
                        late_swept=after.get(fig.batch_id, {}).get(LATE_SWEPT, 0))
                for fig, _swept in read]
