"""Transactional ids: a bounded set, reused batch after batch, unique to one sink and one run.

Shape: ``{prefix}-{sinkId}-{run}-{parity}-{partition}-{attempt}``.
- ``sinkId`` is created once and stored in the sink's commit log under the checkpoint, so two
  queries on their own checkpoints never fence each other, even given the same
  ``transactionalIdPrefix``, and orphan clean-up by prefix touches only this sink's transactions.
  A copy of a checkpoint would carry the id to a second query: the commit log records its
  checkpoint's place, and a query on a copy stops at start (commit_log.require_own_place). ACLs can use a PREFIXED pattern on the prefix.
- ``run`` (6 hex digits of the query run's id, Spark's job group) keeps a zombie of an earlier run
  off the ids the current one uses. PySpark's TaskContext has no stage attempt number, so a zombie
  of an earlier stage attempt of the same batch can share an id: the committer confirms with
  DescribeTransactions before it takes PRODUCER_FENCED to mean "lost" (invariant 15).
- ``parity`` is the batch id modulo 2: batch N+1's transactions never share an id with batch N's,
  so a sweep after batch N committed can abort N's late attempts without touching the running
  batch (invariant 13).
- ``partition`` and ``attempt``: one id per write partition and task attempt, so retries and
  speculative attempts never fence each other's transactions (invariant 9).
Within a run the set is bounded by partitions x 2 x task attempts (invariant 10);
a new run starts a new set, and the coordinator forgets unused ids after
``transactional.id.expiration.ms`` (7 days by default).

Ids without the run and parity parts (``{prefix}-{sinkId}-{partition}-{attempt}``, written by
development builds before them) still parse, so recovery and the orphan sweep handle such
checkpoints.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

LEGACY_RUN = ""
"""``IdParts.run`` of an id without the run and parity parts (the older shape)."""


def run_tag(run_id: str | None) -> str:
    """6 hex digits naming one run of a query (``spark.jobGroup.id`` is the run id)."""
    if not run_id:
        return "000000"
    return hashlib.blake2b(run_id.encode(), digest_size=3).hexdigest()


@dataclass(frozen=True)
class IdParts:
    run: str
    parity: int          # batch id % 2; -1 in the legacy shape
    partition: int
    attempt: int


@dataclass(frozen=True)
class TransactionalIdFactory:
    prefix: str
    sink_id: str

    @property
    def sink_prefix(self) -> str:
        """Every id of this sink starts with this string."""
        return f"{self.prefix}-{self.sink_id}-"

    def transactional_id(self, partition_id: int, attempt: int, *, run: str = "000000",
                         batch_id: int = 0) -> str:
        if partition_id < 0 or attempt < 0 or batch_id < 0:
            raise ValueError(f"partition {partition_id}, attempt {attempt} and batch {batch_id} "
                             "must be >= 0")
        if len(run) != 6 or any(ch not in "0123456789abcdef" for ch in run):
            raise ValueError(f"run tag {run!r} must be 6 lower-case hex digits (run_tag())")
        return f"{self.sink_prefix}{run}-{batch_id % 2}-{partition_id}-{attempt}"

    def owns(self, transactional_id: str) -> bool:
        return self.parse(transactional_id) is not None

    def parse(self, transactional_id: str) -> IdParts | None:
        """The parts of one of this sink's ids (either shape), else None."""
        if not transactional_id.startswith(self.sink_prefix):
            return None
        rest = transactional_id[len(self.sink_prefix):].split("-")
        if len(rest) == 2 and all(p.isdigit() for p in rest):
            return IdParts(LEGACY_RUN, -1, int(rest[0]), int(rest[1]))
        if (len(rest) == 4 and len(rest[0]) == 6
                and all(ch in "0123456789abcdef" for ch in rest[0])
                and rest[1] in ("0", "1") and all(p.isdigit() for p in rest[2:])):
            return IdParts(rest[0], int(rest[1]), int(rest[2]), int(rest[3]))
        return None


def prefix_of(transactional_id: str, sink_id: str) -> str | None:
    """The ``transactionalIdPrefix`` that made ``transactional_id`` for sink ``sink_id`` (either
    shape), else None: the prefix is whatever precedes ``-{sinkId}-`` when the rest parses."""
    mark = f"-{sink_id}-"
    at = transactional_id.find(mark)
    while at > 0:
        prefix = transactional_id[:at]
        if TransactionalIdFactory(prefix, sink_id).parse(transactional_id) is not None:
            return prefix
        at = transactional_id.find(mark, at + 1)
    return None
