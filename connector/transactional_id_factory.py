"""Transactional ids: a bounded set, reused every batch, unique to one sink.

Why this shape: ``{prefix}-{sinkId}-{partition}-{attempt}``.
- One id per write partition and task attempt, so retries and speculative attempts never fence each
  other's transactions (invariant 9); a retry of the same attempt number fences the zombie.
- Reused every batch, so the id set stays bounded (invariant 10): partitions x attempts.
- ``sinkId`` is created once and stored in the sink's commit log under the checkpoint, so two queries
  given the same ``transactionalIdPrefix`` still never fence each other, and orphan clean-up by
  prefix touches only this sink's transactions. ACLs can use a PREFIXED pattern on the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransactionalIdFactory:
    prefix: str
    sink_id: str

    @property
    def sink_prefix(self) -> str:
        """Every id of this sink starts with this string."""
        return f"{self.prefix}-{self.sink_id}-"

    def transactional_id(self, partition_id: int, attempt: int) -> str:
        if partition_id < 0 or attempt < 0:
            raise ValueError(f"partition {partition_id} and attempt {attempt} must be >= 0")
        return f"{self.sink_prefix}{partition_id}-{attempt}"

    def owns(self, transactional_id: str) -> bool:
        return self.parse(transactional_id) is not None

    def parse(self, transactional_id: str) -> tuple[int, int] | None:
        """(partition, attempt) of one of our ids, else None."""
        if not transactional_id.startswith(self.sink_prefix):
            return None
        rest = transactional_id[len(self.sink_prefix):].split("-")
        if len(rest) != 2 or not all(p.isdigit() for p in rest):
            return None
        return int(rest[0]), int(rest[1])
