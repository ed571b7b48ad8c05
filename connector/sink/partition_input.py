"""What one task partition of a batch read: its row count and an order-independent digest.

The sink records this for every task partition in each decision, so that a lost round is re-written
only by the same task layout (invariant 12): the same task partitions, each with the same rows.

Why these fields: row order within a partition is not deterministic after a shuffle, so the digest
is a sum over rows. The key digest is a real hash of every key's bytes (a polynomial hash per key,
mixed, summed mod 2**64): keys are short, so it costs a few percent of the write path. Values get
byte totals only: hashing them would cost about a quarter of the write path's CPU per record at
100 bytes and more than the write itself at 1 KB (figures in CHANGELOG.md). The digest is not
cryptographic: it detects a different layout or a non-deterministic plan, not an adversary.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa

_MASK64 = (1 << 64) - 1
_BASE = 0x100000001B3  # odd: invertible mod 2**64, so a key's hash does not depend on where it sits
_BASE_INV = pow(_BASE, -1, 1 << 64)
_NULL = np.uint64(0x6A09E667F3BCC909)  # what a null key adds (an empty key hashes differently)
_LEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on uint64 (wrapping arithmetic)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


class _Powers:
    """BASE**i and BASE**-i mod 2**64 for i < n, grown on demand and shared by a worker's tasks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.up = np.ones(1, np.uint64)
        self.down = np.ones(1, np.uint64)

    def upto(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        up, down = self.up, self.down
        if len(up) >= n:
            return up, down
        with self._lock:
            size = max(n, 2 * len(self.up), 1 << 12)
            self.up = _geometric(_BASE, size)
            self.down = _geometric(_BASE_INV, size)
            return self.up, self.down


def _geometric(base: int, n: int) -> np.ndarray:
    out = np.empty(n, np.uint64)
    out[0] = 1
    done = 1
    with np.errstate(over="ignore"):
        while done < n:  # doubling: out[done + i] = out[i] * base**done
            step = min(done, n - done)
            factor = np.uint64(pow(base, done, 1 << 64))
            np.multiply(out[:step], factor, out=out[done:done + step])
            done += step
    return out


_POWERS = _Powers()


def _binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets relative to the first value, the values' bytes) of a binary or string array."""
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        width = np.int64
    elif pa.types.is_binary(arr.type) or pa.types.is_string(arr.type):
        width = np.int32
    else:
        arr = arr.cast(pa.large_binary())
        width = np.int64
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], width, len(arr) + 1, arr.offset * np.dtype(width).itemsize)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = (np.frombuffer(bufs[2], np.uint8, hi - lo, lo) if bufs[2] is not None and hi > lo
            else np.empty(0, np.uint8))
    return offsets.astype(np.int64) - lo, data


def _key_hash_sum(arr: pa.Array) -> int:
    """Sum over rows of mix(hash(key bytes), length); a null key adds a constant."""
    offsets, data = _binary_parts(arr)
    starts, lengths = offsets[:-1], np.diff(offsets)
    per_row = np.zeros(len(arr), np.uint64)
    nonempty = np.flatnonzero(lengths)
    if len(nonempty):
        up, down = _POWERS.upto(len(data))
        weighted = np.multiply(data, up[:len(data)], dtype=np.uint64)
        # Each non-empty key's bytes run from its start to the next non-empty key's start.
        seg = np.add.reduceat(weighted, starts[nonempty])
        with np.errstate(over="ignore"):
            per_row[nonempty] = seg * down[starts[nonempty]]  # as if the key started at 0
    with np.errstate(over="ignore"):
        per_row += lengths.astype(np.uint64) * _LEN
        per_row = _mix(per_row)
        if arr.null_count:
            per_row[~np.asarray(arr.is_valid())] = _NULL
        return int(per_row.sum(dtype=np.uint64))


def _value_bytes(arr: pa.Array) -> int:
    offsets, _ = _binary_parts(arr)
    return int(offsets[-1])


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    """A column by Spark's case-insensitive name."""
    for i, f in enumerate(batch.schema):
        if f.name.lower() == name:
            return batch.column(i)
    return None


@dataclass(frozen=True)
class PartitionInput:
    """One task partition's input: rows, and (when known) key/value byte totals and a key digest.

    ``None`` marks a field a record did not carry (a decision written before txkafka recorded it);
    comparisons skip unknown fields.
    """

    rows: int | None
    key_bytes: int | None = None
    value_bytes: int | None = None
    key_hash: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "key_bytes": self.key_bytes, "value_bytes": self.value_bytes,
                "key_hash": self.key_hash}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "PartitionInput":
        def num(k: str) -> int | None:
            return int(d[k]) if d.get(k) is not None else None

        return cls(num("rows"), num("key_bytes"), num("value_bytes"),
                   str(d["key_hash"]) if d.get("key_hash") is not None else None)

    def difference(self, now: "PartitionInput") -> str | None:
        """How ``now`` differs from this (the earlier run's input), or None if it does not."""
        if self.rows is not None and now.rows is not None and self.rows != now.rows:
            return f"{self.rows} rows then, {now.rows} now"
        changed = [name for name, a, b in (("key bytes", self.key_bytes, now.key_bytes),
                                           ("value bytes", self.value_bytes, now.value_bytes),
                                           ("key digest", self.key_hash, now.key_hash))
                   if a is not None and b is not None and a != b]
        if changed:
            return f"{now.rows} rows both times, but other rows ({', '.join(changed)} differ)"
        return None


class InputDigest:
    """Accumulates a task's PartitionInput over the Arrow batches it reads."""

    def __init__(self) -> None:
        self.rows = 0
        self.key_bytes = 0
        self.value_bytes = 0
        self._key_hash = 0

    def update(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if not n:
            return
        self.rows += n
        key = _column(batch, "key")
        value = _column(batch, "value")
        if key is None:  # no key column: every key is null
            self._key_hash = (self._key_hash + n * int(_NULL)) & _MASK64
        else:
            self._key_hash = (self._key_hash + _key_hash_sum(key)) & _MASK64
            self.key_bytes += _value_bytes(key)
        if value is not None:
            self.value_bytes += _value_bytes(value)

    def wrap(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The batches unchanged, each digested as it passes."""
        for b in batches:
            self.update(b)
            yield b

    def result(self) -> PartitionInput:
        return PartitionInput(self.rows, self.key_bytes, self.value_bytes,
                              f"{self._key_hash:016x}")
