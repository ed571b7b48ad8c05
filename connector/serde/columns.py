"""Arrow column chores the codecs share: arrays over numpy buffers (``pa.array`` would import
pandas in a worker's first task), rows put back in place, and the search for the rows that make
a whole-column call fail."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa


def bitmap(valid: np.ndarray) -> pa.Buffer:
    """Arrow's validity (or boolean) bits of a numpy bool array."""
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def mask(keep: np.ndarray) -> pa.Array:
    """A boolean Arrow array over a numpy bool array."""
    return pa.Array.from_buffers(pa.bool_(), len(keep), [None, bitmap(keep)])


def ints(values: np.ndarray) -> pa.Array:
    """An int64 Arrow array over a numpy array (indices for ``take``)."""
    return pa.Array.from_buffers(pa.int64(), len(values),
                                 [None, pa.py_buffer(np.ascontiguousarray(values, np.int64))])


def bools(arr: pa.Array) -> np.ndarray:
    """A boolean Arrow array as numpy (no nulls expected: fill them first)."""
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def spread(values: pa.Array, rows: np.ndarray, n: int) -> pa.Array:
    """An array of length ``n`` holding ``values`` at the sorted ``rows``, null elsewhere."""
    if len(rows) == n:
        return values
    if not len(values):
        return pa.nulls(n, values.type)
    where = np.zeros(n, dtype=np.int64)
    where[rows] = np.arange(len(rows), dtype=np.int64)
    present = np.zeros(n, dtype=bool)
    present[rows] = True
    return values.take(pa.Array.from_buffers(pa.int64(), n, [bitmap(present),
                                                             pa.py_buffer(where)]))


def offsets_and_data(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets from 0, uint8 data) of a binary or string array: its slice's bytes only."""
    bufs = arr.buffers()
    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    offsets = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)[
        arr.offset:arr.offset + len(arr) + 1].astype(np.int64)
    if bufs[2] is None or not len(offsets):
        return np.zeros(len(arr) + 1, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    lo = int(offsets[0])
    return offsets - lo, np.frombuffer(bufs[2], np.uint8)[lo:int(offsets[-1])]


def null_free(values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(the rows of ``values`` that are not null, those values)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    valid = bools(values.is_valid())
    rows = np.flatnonzero(valid)
    return rows, (values.filter(mask(valid)) if len(rows) < len(values) else values)


def by_halves(items: pa.Array, convert: Callable[[pa.Array], pa.Array],
              failed: Callable[[Exception], str], null_type: pa.DataType,
              join: Callable[[pa.Array, pa.Array], pa.Array] | None = None,
              ) -> tuple[pa.Array, dict[int, str]]:
    """``convert`` over all ``items`` at once; where it raises, over each half, down to single
    items, each of which fails with ``failed(error)`` as its message (and a null of
    ``null_type`` in its place). A few bad rows cost a few more calls, never the good rows."""
    try:
        return convert(items), {}
    except Exception as e:  # noqa: BLE001 - any failure of the native call is the rows'
        if len(items) == 1:
            return pa.nulls(1, null_type), {0: failed(e)}
    half = len(items) // 2
    left, bad = by_halves(items.slice(0, half), convert, failed, null_type, join)
    right, bad_right = by_halves(items.slice(half), convert, failed, null_type, join)
    bad.update({half + j: why for j, why in bad_right.items()})
    return (join or _concat)(left, right), bad


def _concat(a: pa.Array, b: pa.Array) -> pa.Array:
    return pa.concat_arrays([a, b])


def drop_rows(values: pa.Array, rows: np.ndarray, bad: dict[int, str]
              ) -> tuple[pa.Array, np.ndarray]:
    """``values`` and their ``rows`` without the positions in ``bad``."""
    if not bad:
        return values, rows
    keep = np.ones(len(rows), dtype=bool)
    keep[list(bad)] = False
    return values.filter(mask(keep)), rows[keep]
