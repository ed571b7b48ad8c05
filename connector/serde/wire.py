"""Confluent's wire format header (magic byte 0, then a 4-byte big-endian schema id), for a whole
column at once: numpy reads every row's header from the Arrow buffers, never a Python loop."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .columns import mask, offsets_and_data

MAGIC = 0
HEADER_SIZE = 5


@dataclass
class SplitColumn:
    """A column of framed values cut into schema ids and payloads (the bytes after the header).

    ``ids`` is -1 where the row is null or bad; ``bad`` maps a row index to what was wrong."""

    ids: np.ndarray          # int64 per row
    payloads: pa.BinaryArray  # null where the row is null or bad
    nulls: np.ndarray        # bool per row: the value was null (a tombstone), not an error
    bad: dict[int, str]


def split_column(values: pa.Array) -> SplitColumn:
    """Read the header of every row: schema ids, payloads, bad rows named."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    values = values.cast(pa.binary()) if not pa.types.is_binary(values.type) else values
    n = len(values)
    offsets, data = offsets_and_data(values)
    starts, ends = offsets[:-1], offsets[1:]
    lengths = ends - starts
    nulls = values.is_null().to_numpy(zero_copy_only=False) if values.null_count else \
        np.zeros(n, dtype=bool)
    short = (lengths < HEADER_SIZE) & ~nulls
    ok = ~nulls & ~short
    at = starts if ok.all() else np.where(ok, starts, 0)
    if len(data) < HEADER_SIZE:  # no row has a header: nothing to gather
        at = np.zeros(0, dtype=np.int64)
        ok[:] = False
    magic = data[at] if len(at) else np.zeros(n, dtype=np.uint8)
    ids = np.zeros(n, dtype=np.int64)
    for k in range(1, HEADER_SIZE):  # one gather per header byte: big-endian int32
        if len(at):
            ids = (ids << 8) | data[at + k]
    wrong_magic = ok & (magic != MAGIC)
    good = ok & ~wrong_magic
    ids[~good] = -1
    bad: dict[int, str] = {}
    for i in np.flatnonzero(short):
        bad[int(i)] = (f"no wire-format header: {int(lengths[i])} byte(s), fewer than the "
                       f"{HEADER_SIZE} of magic byte 0 and a schema id")
    for i in np.flatnonzero(wrong_magic):
        bad[int(i)] = (f"no magic byte: the first byte is {int(magic[i])}, not 0 (not written "
                       "in the Schema Registry wire format)")
    # A copy in C++ (the headers sit between the payloads, so offsets cannot be shared). An
    # explicit stop: pyarrow's binary_slice without one sizes its output wrongly.
    payloads = pc.binary_slice(values, HEADER_SIZE, np.iinfo(np.int32).max)
    if not good.all():
        payloads = pc.if_else(mask(good), payloads, pa.scalar(None, pa.binary()))
    return SplitColumn(ids=ids, payloads=payloads, nulls=nulls, bad=bad)


def frame_column(schema_id: int, payloads: pa.Array) -> pa.Array:
    """Prepend the header of ``schema_id`` to every non-null payload (Arrow's element-wise join,
    in C++; a null payload stays null)."""
    header = pa.scalar(bytes([MAGIC]) + int(schema_id).to_bytes(4, "big"), pa.binary())
    return pc.binary_join_element_wise(header, payloads.cast(pa.binary()), b"")
