"""Avro binary datums (Confluent's wire format, after the header) to and from Arrow, column-wise.

Decoding reads one field for all records at once: an int64 array holds each record's position,
each field is one numpy pass (varints branch-free from 8-byte words), strings become the even
values of one binary array over the data (one C++ copy); unions split the records by branch;
arrays and maps first find where every item starts (a pass per item index over the values that
still have items; long blocks of varints by one scan; a few values with thousands of items in
plain Python), then decode all items in one call. Encoding mirrors it: each field's encoded size
for all values, row offsets, then each field written for all rows as 8-byte words into the one
buffer that becomes the payloads; neighbouring values of at most 8 bytes together (small fields
of a record, a map entry, a union's tag and value, a short string and its length) are first
joined into one word, written by one store. A column is worked on in slices of about 2 MiB,
so that each field's pass stays in the CPU's cache. Bad rows never raise: they are collected
with a message and come out null.

Types map as Spark's ``from_avro`` and ``to_avro`` map them (its ``SchemaConverters``): see
:func:`arrow_type` and :func:`schema_from_arrow`. A reader schema different from the writer's
is resolved as the Avro specification says ("Schema Resolution"), compiled once per (writer,
reader) pair into the decoder itself, column-wise: fields matched by name or alias, defaults as
constant columns, dropped fields read past, promotions as casts, enum symbols through a table,
unions by first matching branch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from ..client.record_batch_decoder import _binary, _fixed_binary, _words, numbers_array
from ..client.record_batch_encoder import _offsets_and_data, uvarint_sizes, zigzag
from ..errors import AvroSchemaError
from . import DecodeResult, EncodeResult

__all__ = ["AvroCodec", "arrow_type", "codec", "schema_from_arrow"]

# --------------------------------------------------------------------------- schemas

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})
_NO_DEFAULT = object()
_MAX_PRECISION = 38  # Spark's DecimalType and Arrow's decimal128


@dataclass(eq=False)
class _Field:
    name: str
    type: _S
    default: Any = _NO_DEFAULT
    aliases: tuple[str, ...] = ()


@dataclass(eq=False)
class _S:
    """One parsed Avro schema node."""

    kind: str                       # a primitive, or record, enum, fixed, array, map, union
    logical: str | None = None      # a logical type the node carries validly, else None
    name: str = ""                  # full name of a named type
    aliases: tuple[str, ...] = ()   # full names
    fields: list[_Field] = field(default_factory=list)
    symbols: list[str] = field(default_factory=list)
    enum_default: str | None = None
    size: int = 0
    items: _S | None = None         # array items, map values
    branches: list[_S] = field(default_factory=list)
    precision: int = 0
    scale: int = 0

    @property
    def short_name(self) -> str:
        return self.name.rsplit(".", 1)[-1]


def _full(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


class _Undefined(AvroSchemaError):
    """A type name the schema uses and no schema parsed so far defines."""


class _Parser:
    def __init__(self) -> None:
        self.names: dict[str, _S] = {}

    def parse(self, obj: Any, ns: str) -> _S:
        if isinstance(obj, str):
            if obj in _PRIMITIVES:
                return _S(obj)
            for candidate in (_full(obj, ns), obj):
                if candidate in self.names:
                    return self.names[candidate]
            raise _Undefined(f"the Avro schema refers to type {obj!r}, which it does not "
                                  "define (define a named type before using its name, or "
                                  "register the schema that defines it as a reference)")
        if isinstance(obj, list):
            branches = [self.parse(b, ns) for b in obj]
            if any(b.kind == "union" for b in branches):
                raise AvroSchemaError("an Avro union holds a union directly, which Avro forbids")
            return _S("union", branches=branches)
        if not isinstance(obj, dict) or "type" not in obj:
            raise AvroSchemaError(f"not an Avro schema: {json.dumps(obj)[:200]} (expected a type "
                                  "name, a union list, or an object with \"type\")")
        t = obj["type"]
        if isinstance(t, (dict, list)):
            return self.parse(t, ns)
        if t in _PRIMITIVES:
            return self._logical(_S(t), obj)
        if t in _NAMED:
            return self._named(t, obj, ns)
        if t == "array":
            return _S("array", items=self.parse(obj.get("items"), ns))
        if t == "map":
            return _S("map", items=self.parse(obj.get("values"), ns))
        return self.parse(t, ns)  # {"type": "SomeNamedType"}

    def _named(self, t: str, obj: dict, ns: str) -> _S:
        if "name" not in obj:
            raise AvroSchemaError(f"an Avro {t} has no \"name\"")
        name = obj["name"]
        space = obj.get("namespace", ns) if "." not in name else name.rsplit(".", 1)[0]
        full = _full(name, space or "")
        s = _S("record" if t == "error" else t, name=full,
               aliases=tuple(_full(a, space or "") for a in obj.get("aliases", ())))
        if full in self.names:
            raise AvroSchemaError(f"the Avro schema defines {full!r} twice")
        self.names[full] = s
        if s.kind == "record":
            for f in obj.get("fields", []):
                s.fields.append(_Field(f["name"], self.parse(f["type"], space or ""),
                                       f.get("default", _NO_DEFAULT), tuple(f.get("aliases", ()))))
        elif s.kind == "enum":
            s.symbols = list(obj.get("symbols", []))
            s.enum_default = obj.get("default")
        else:
            s.size = int(obj["size"])
            self._logical(s, obj)
        return s

    @staticmethod
    def _logical(s: _S, obj: dict) -> _S:
        """Keep a logical type only where Avro defines it on this type; others are ignored, as
        the specification says (the underlying type is read)."""
        lt = obj.get("logicalType")
        valid = {"int": {"date", "time-millis"},
                 "long": {"time-micros", "timestamp-millis", "timestamp-micros",
                          "local-timestamp-millis", "local-timestamp-micros"},
                 "string": {"uuid"}, "bytes": {"decimal"}, "fixed": {"decimal"}}.get(s.kind, ())
        if lt not in valid:
            return s
        if lt == "decimal":
            p, sc = obj.get("precision"), obj.get("scale", 0)
            if not isinstance(p, int) or not isinstance(sc, int) or p <= 0 or not 0 <= sc <= p:
                return s
            if s.kind == "fixed" and p > _max_digits(s.size):
                return s  # does not fit the fixed size: Avro ignores the logical type
            if p > _MAX_PRECISION:
                raise AvroSchemaError(f"an Avro decimal has precision {p}; Spark's decimals hold "
                                      f"at most {_MAX_PRECISION} digits")
            s.precision, s.scale = p, sc
        s.logical = lt
        return s


def _max_digits(size: int) -> int:
    return len(str(2 ** (8 * size - 1) - 1)) - 1


def _parse(text: str, references: Sequence[str] = ()) -> _S:
    """The schema of ``text``; ``references`` are the texts of the schemas whose named types
    it uses (a registry's references, in any order: each is parsed once the types it uses are)."""
    parser = _Parser()
    pending = [_loads(t) for t in references]
    while pending:
        left = []
        for obj in pending:
            attempt = _Parser()
            attempt.names = dict(parser.names)
            try:
                _parse_obj(attempt, obj)
            except _Undefined:  # uses a type of a reference not parsed yet: next round
                left.append(obj)
                continue
            # A reference's types may be in the others too (shared imports): keep the first.
            parser.names = {**attempt.names, **parser.names}
        if len(left) == len(pending):
            _parse_obj(parser, left[0])  # raises: a name none of the references defines
        pending = left
    return _parse_obj(parser, _loads(text))


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError) as e:
        raise AvroSchemaError(f"an Avro schema is not valid JSON ({e})") from None


def _parse_obj(parser: _Parser, obj: Any) -> _S:
    try:
        return parser.parse(obj, "")
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, AvroSchemaError):
            raise
        raise AvroSchemaError(f"an Avro schema does not parse ({type(e).__name__}: {e})") from None


# --------------------------------------------------------------------------- Arrow types

def _nn(s: _S) -> list[_S]:
    return [b for b in s.branches if b.kind != "null"]


def _union_rep(s: _S) -> str:
    """How Spark shows a union: 'null' (only null), 'single' (one other type, or int/long or
    float/double merged), or 'struct' (member0..memberN over the non-null branches)."""
    nn = _nn(s)
    if not nn:
        return "null"
    if len(nn) == 1 or {b.kind for b in nn} in ({"int", "long"}, {"float", "double"}) \
            and len(nn) == 2:
        return "single"
    return "struct"


def _arrow(s: _S, seen: tuple[str, ...] = ()) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of a schema node, as Spark's from_avro maps it."""
    k, lt = s.kind, s.logical
    if k == "null":
        return pa.null(), True
    if k == "boolean":
        return pa.bool_(), False
    if k == "int":
        return (pa.date32() if lt == "date" else pa.int32()), False
    if k == "long":
        if lt in ("timestamp-millis", "timestamp-micros"):
            return pa.timestamp("us", tz="UTC"), False
        if lt in ("local-timestamp-millis", "local-timestamp-micros"):
            return pa.timestamp("us"), False
        return pa.int64(), False
    if k == "float":
        return pa.float32(), False
    if k == "double":
        return pa.float64(), False
    if k in ("bytes", "fixed"):
        return (pa.decimal128(s.precision, s.scale) if lt == "decimal" else pa.binary()), False
    if k in ("string", "enum"):
        return pa.string(), False
    if k == "record":
        if s.name in seen:
            raise AvroSchemaError(f"the Avro record {s.name!r} contains itself; Spark has no "
                                  "column type for a recursive record")
        inner = seen + (s.name,)
        return pa.struct([pa.field(f.name, *_arrow(f.type, inner)) for f in s.fields]), False
    if k == "array":
        return pa.list_(pa.field("element", *_arrow(s.items, seen))), False
    if k == "map":
        return pa.map_(pa.string(), pa.field("value", *_arrow(s.items, seen))), False
    # union
    nullable = len(_nn(s)) < len(s.branches)
    rep = _union_rep(s)
    if rep == "null":
        return pa.null(), True
    nn = _nn(s)
    if rep == "single":
        if len(nn) == 1:
            t, inner_nullable = _arrow(nn[0], seen)
            return t, nullable or inner_nullable
        return (pa.int64() if nn[0].kind in ("int", "long") else pa.float64()), nullable
    return pa.struct([pa.field(f"member{i}", _arrow(b, seen)[0], True)
                      for i, b in enumerate(nn)]), nullable


def arrow_type(schema: str, references: Sequence[str] = ()) -> pa.DataType:
    """The Arrow type Spark's from_avro gives an Avro schema (JSON text): record -> struct,
    array -> list, map -> map<string, V>, enum and uuid -> string, [null, T] -> nullable T,
    [int, long] -> int64, [float, double] -> float64, other unions -> struct<member0..>,
    bytes and fixed -> binary, decimal -> decimal128, date -> date32, timestamp-* ->
    timestamp[us, UTC], local-timestamp-* -> timestamp[us], time-millis -> int32,
    time-micros -> int64."""
    return _arrow(_parse(schema, references))[0]


# --------------------------------------------------------------------------- decoding

_PAD = 32  # bytes after the data: 8-byte word reads at a position up to 10 past the end
_HI = np.uint64(0x8080808080808080)
_LO7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_ONE = np.uint64(1)
_U7 = np.uint64(7)
_SWAR = [(np.uint64(0x007F007F007F007F), np.uint64(0x3F803F803F803F80), np.uint64(1)),
         (np.uint64(0x00003FFF00003FFF), np.uint64(0x0FFFC0000FFFC000), np.uint64(2)),
         (np.uint64(0x000000000FFFFFFF), np.uint64(0x00FFFFFFF0000000), np.uint64(4))]
_INT32_SPAN = np.uint64(0xFFFFFFFF)
_ALL = np.uint64(2**64 - 1)
_CHUNK_BYTES = 1 << 21  # payload bytes per slice of a column: a core's share of cache
_CHUNK_ROWS_MIN = 4096
_FIRST_ROWS_MAX = 1 << 16  # a first slice's rows, however few bytes the column takes
_SCAN_MIN = 64
_FEW_ROWS = 2            # values still going, with ...
_FEW_ROWS_ITEMS = 256    # ... more items than this: skipped in plain Python  # a block with more varint items than this is read by one scan of its bytes
_MAX_ITEMS = 1 << 24  # items of zero bytes each (null, empty record) one block may declare


class _Ctx:
    """One decode call: the padded data, its word views, each record's end, and the errors."""

    def __init__(self, buf: np.ndarray, total: int, ends: np.ndarray):
        self.buf = buf
        self.total = total
        self.ends = ends  # per top-level row
        self.w64 = np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))
        self.f32 = np.ndarray(shape=(len(buf) - 3,), dtype="<f4", buffer=buf, strides=(1,))
        self.f64 = np.ndarray(shape=(len(buf) - 7,), dtype="<f8", buffer=buf, strides=(1,))
        self.words = _words(buf)
        self.data = pa.py_buffer(buf)
        self.errors: list[tuple[np.ndarray, str]] = []

    def fail(self, rows: np.ndarray, message: str) -> None:
        if len(rows):
            self.errors.append((rows, message))

    def clamp(self, pos: np.ndarray, rows: np.ndarray) -> None:
        """Positions past all data (a record cut short) stop at its end: later reads stay in
        the buffer; the record is an error row."""
        if len(pos) and pos.max() > self.total:
            over = pos > self.total
            self.fail(rows[over], "the datum ends before its last field does (truncated data)")
            pos[over] = self.total


def _varint_ends(ctx: _Ctx, pos: np.ndarray, rows: np.ndarray, x: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the 8-byte words ``x`` at ``pos`` (not all one-byte varints): the bits of each
    varint's first 8 bytes (all ones when it runs longer), the positions after each, and which
    run longer. A varint of more than 10 bytes (or 64 bits) is an error row."""
    below = np.invert(x)
    below &= _HI                 # the high bit of each byte that ends the varint
    first = np.negative(below)
    below &= first               # ... the first of them, alone
    below -= _ONE                # every bit below it: the varint's bits (all when none ends it)
    size = np.bitwise_count(below)
    size += 1
    size >>= 3
    after = pos + size
    longer = np.flatnonzero(below == _ALL)
    if len(longer):
        p = pos[longer]
        more = ctx.buf[p + 8] >= 0x80
        after[longer] = p + 9 + more
        ctx.fail(rows[longer[more & (ctx.buf[p + 9] > 1)]],
                 "a varint runs past 10 bytes or 64 bits")
    return below, after, longer


def _skip_varints(ctx: _Ctx, pos: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The positions after the varints at ``pos`` (their values are not needed)."""
    if not len(pos):
        return pos
    if ctx.buf.take(pos).max() < 0x80:
        return pos + 1
    return _varint_ends(ctx, pos, rows, ctx.w64[pos])[1]


def _uvarints(ctx: _Ctx, pos: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unsigned varints at ``pos``: (uint64 values, positions after them). Up to 8 bytes are
    decoded branch-free from the 8-byte word at each position (SWAR: drop the continuation bits,
    then pack 7-bit groups pairwise), in place; only 9- and 10-byte varints take more passes."""
    if not len(pos):
        return np.zeros(0, np.uint64), pos
    b = ctx.buf.take(pos)
    if b.max() < 0x80:
        return b.astype(np.uint64), pos + 1
    x = ctx.w64[pos]
    below, after, longer = _varint_ends(ctx, pos, rows, x)
    x &= below
    x &= _LO7
    t = np.empty_like(x)
    for keep, move, shift in _SWAR:
        np.right_shift(x, shift, out=t)
        t &= move
        x &= keep
        x |= t
    if len(longer):
        p = pos[longer]
        b8 = ctx.buf[p + 8].astype(np.uint64)
        b9 = ctx.buf[p + 9].astype(np.uint64)
        x[longer] |= ((b8 & np.uint64(0x7F)) << np.uint64(56)) | (
            np.where(b8 >= 0x80, b9 & _ONE, 0).astype(np.uint64) << np.uint64(63))
    return x, after


def _unzigzag(u: np.ndarray) -> np.ndarray:
    """Zigzag-decoded int64 values (``u`` is consumed)."""
    sign = u & _ONE
    np.negative(sign, out=sign)
    u >>= _ONE
    u ^= sign
    return u.view(np.int64)


def _longs(ctx: _Ctx, pos: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, pos = _uvarints(ctx, pos, rows)
    return _unzigzag(u), pos


def _ints(ctx: _Ctx, pos: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, pos = _uvarints(ctx, pos, rows)
    if len(u) and u.max() > _INT32_SPAN:
        bad = u > _INT32_SPAN
        ctx.fail(rows[bad], "an Avro int holds a value beyond 32 bits")
        u = np.where(bad, 0, u).astype(np.uint64)
    return _unzigzag(u), pos


def _lengths(ctx: _Ctx, pos: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A bytes/string length, then where the bytes start; lengths that are negative or run past
    the data are error rows (length 0)."""
    n, start = _longs(ctx, pos, rows)
    if len(n) and (n.min() < 0 or (n - (ctx.total - start)).max() > 0):  # no overflow
        bad = (n < 0) | (n > ctx.total - start)
        ctx.fail(rows[bad], "a string or bytes length is negative or runs past the data")
        n = np.where(bad, 0, n)
    return n, start


class _Bad(Exception):
    """Data a plain-Python skip cannot read (the row is reported by its caller)."""


def _varint1(mv: memoryview, at: int) -> tuple[int, int]:
    """One varint (zigzag-decoded) at ``at``, and the position after it."""
    b = mv[at]
    at += 1
    value, shift = b & 0x7F, 7
    while b >= 0x80:
        if shift > 63:
            raise _Bad
        b = mv[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
    return (value >> 1) ^ -(value & 1), at


class _Dec:
    """A decoder of one (writer, reader) schema pair to the reader's Arrow type."""

    @property
    def has_skip1(self) -> bool:
        return self.fixed is not None

    def skip1(self, mv: memoryview, at: int) -> int:
        """The position after the value at ``at``, in plain Python (see ``_Array._few``)."""
        if self.fixed is None:
            raise _Bad
        return at + self.fixed

    type: pa.DataType
    min_size = 1  # fewest bytes one value takes (bounds the item count of a corrupt block)
    fixed: int | None = None  # bytes every value takes, if they all take the same

    def decode(self, ctx: _Ctx, pos: np.ndarray, rows: np.ndarray
               ) -> tuple[pa.Array, np.ndarray]:
        raise NotImplementedError

    def skip(self, ctx: _Ctx, pos: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The positions after the values at ``pos``, without building them."""
        if self.fixed is not None:
            return pos + self.fixed
        return self.decode(ctx, pos, rows)[1]


class _Null(_Dec):
    type = pa.null()
    min_size = 0
    fixed = 0

    def decode(self, ctx, pos, rows):
        return pa.nulls(len(pos)), pos


class _Bool(_Dec):
    type = pa.bool_()
    fixed = 1

    def decode(self, ctx, pos, rows):
        b = ctx.buf[pos]
        if len(b) and b.max() > 1:
            ctx.fail(rows[b > 1], "an Avro boolean byte is neither 0 nor 1")
        bits = pa.py_buffer(np.packbits(b != 0, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), len(b), [None, bits]), pos + 1


class _Varint(_Dec):
    """A value that is one varint (int, long, enum): read past without decoding it."""

    has_skip1 = True

    def skip(self, ctx, pos, rows):
        return _skip_varints(ctx, pos, rows)

    def skip1(self, mv, at):
        return _varint1(mv, at)[1]


class _Number(_Varint):
    """int or long, read as the reader's int, long, float, double, date or timestamp."""

    def __init__(self, writer: str, out: pa.DataType, scale: int = 1):
        self.read = _ints if writer == "int" else _longs
        self.type, self.scale = out, scale
        self.dtype = {4: np.float32, 8: np.float64}[out.bit_width // 8] \
            if pa.types.is_floating(out) else (np.int32 if out.bit_width == 32 else np.int64)

    def decode(self, ctx, pos, rows):
        v, pos = self.read(ctx, pos, rows)
        if self.scale != 1:
            limit = np.iinfo(np.int64).max // self.scale
            if len(v) and np.abs(v).max() > limit:
                bad = np.abs(v) > limit
                ctx.fail(rows[bad], "a timestamp is beyond what microseconds hold")
                v = np.where(bad, 0, v)
            v = v * self.scale
        return numbers_array(v, self.type, self.dtype), pos


class _Float(_Dec):
    def __init__(self, writer: str, out: pa.DataType):
        self.width = 4 if writer == "float" else 8
        self.min_size = self.fixed = self.width
        self.type = out
        self.dtype = np.float32 if pa.types.is_float32(out) else np.float64

    def decode(self, ctx, pos, rows):
        v = (ctx.f32 if self.width == 4 else ctx.f64)[pos]
        return numbers_array(v, self.type, self.dtype), pos + self.width


def _valid_utf8(ctx: _Ctx, arr: pa.Array, rows: np.ndarray) -> pa.Array:
    """A binary column as string; values that are not UTF-8 become null error rows."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        idx = _not_utf8(arr)
    ctx.fail(rows[idx], "a string is not valid UTF-8")
    return _null_at(arr, idx).cast(pa.string())


def _not_utf8(arr: pa.Array) -> np.ndarray:
    """Where a binary column's values are not UTF-8 (found by halving: the check is one C++
    pass over each half that fails)."""
    bad: list[int] = []

    def find(lo: int, hi: int) -> None:
        try:
            arr.slice(lo, hi - lo).cast(pa.string())
        except pa.ArrowInvalid:
            if hi - lo == 1:
                bad.append(lo)
            else:
                mid = (lo + hi) // 2
                find(lo, mid)
                find(mid, hi)

    find(0, len(arr))
    return np.array(bad, dtype=np.int64)


def _null_at(arr: pa.Array, idx: np.ndarray) -> pa.Array:
    """``arr`` with the values at ``idx`` made null (one take)."""
    keep = np.ones(len(arr), dtype=bool)
    keep[idx] = False
    return arr.take(_indices(np.arange(len(arr)), keep))


def _indices(values: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """Take indices (int64), null where ``valid`` is False."""
    validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    v = np.ascontiguousarray(values, dtype=np.int64)
    if valid is not None:
        v = np.where(valid, v, 0)
    return pa.Array.from_buffers(pa.int64(), len(v), [validity, pa.py_buffer(v)],
                                 null_count=-1 if valid is None else int(len(v) - valid.sum()))


def _slices(ctx: _Ctx, start: np.ndarray, length: np.ndarray) -> pa.Array:
    """The bytes [start, start + length) of the data as a binary array. Slices in data order
    (a column's values always are, but for array items) are the even values of one binary
    array over the data whose odd values are the gaps between them: one C++ filter copies
    them out, with no per-byte index and no gather. Others go through ``binary_view``."""
    k = len(start)
    if not k:
        return _empty_binaries(0)
    end = start + length
    if k > 1 and (start[1:] < end[:-1]).any():
        return _binary(ctx.words, ctx.data, start, length)
    bounds = np.empty(2 * k + 1, dtype=np.int32)
    bounds[0:2 * k:2] = start
    bounds[1:2 * k:2] = end
    bounds[2 * k] = end[-1]
    both = pa.Array.from_buffers(pa.binary(), 2 * k, [None, pa.py_buffer(bounds), ctx.data])
    return both.take(_evens(k))


def _evens(k: int) -> pa.Array:
    """Take indices 0, 2, 4, ... of ``k`` values."""
    return numbers_array(np.arange(0, 2 * k, 2, dtype=np.int64), pa.int64(), np.int64)


class _Bytes(_Dec):
    """bytes or string, read as the reader's string or binary."""

    def __init__(self, as_string: bool):
        self.as_string = as_string
        self.type = pa.string() if as_string else pa.binary()

    def skip(self, ctx, pos, rows):
        n, start = _lengths(ctx, pos, rows)
        return start + n

    has_skip1 = True

    def skip1(self, mv, at):
        n, at = _varint1(mv, at)
        if n < 0:
            raise _Bad
        return at + n

    def decode(self, ctx, pos, rows):
        n, start = _lengths(ctx, pos, rows)
        arr = _slices(ctx, start, n)
        if self.as_string:
            arr = _valid_utf8(ctx, arr, rows)
        return arr, start + n


class _Fixed(_Dec):
    def __init__(self, size: int):
        self.size = self.min_size = self.fixed = size
        self.type = pa.binary()

    def decode(self, ctx, pos, rows):
        ctx.clamp(pos + self.size, rows)  # reports; the gather below stays in the padding
        pos = np.minimum(pos, ctx.total)
        if self.size == 0:
            return _empty_binaries(len(pos)), pos
        return _fixed_binary(ctx.buf, pos, self.size), pos + self.size


def _empty_binaries(n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int32)),
                                                  pa.py_buffer(b"")])


class _Decimal(_Dec):
    """Big-endian two's complement (bytes, or fixed of ``size``) to decimal128."""

    def __init__(self, size: int | None, precision: int, scale: int):
        self.size = self.fixed = size
        self.min_size = size or 1
        self.type = pa.decimal128(precision, scale)

    def skip(self, ctx, pos, rows):
        if self.size is not None:
            return pos + self.size
        n, start = _lengths(ctx, pos, rows)
        return start + n

    has_skip1 = True

    def skip1(self, mv, at):
        if self.size is not None:
            return at + self.size
        n, at = _varint1(mv, at)
        if n < 0:
            raise _Bad
        return at + n

    def decode(self, ctx, pos, rows):
        if self.size is None:
            n, start = _lengths(ctx, pos, rows)
            if len(n) and n.max() > 16:
                ctx.fail(rows[n > 16], "a decimal has more than 16 bytes (beyond 38 digits)")
            end = start + n
        else:
            n = np.full(len(pos), self.size, dtype=np.int64)
            start = np.minimum(pos, ctx.total)
            end = start + n
            ctx.clamp(end.copy(), rows)
        out = np.zeros((len(n), 16), dtype=np.uint8)
        if len(n):
            negative = (ctx.buf[start] >= 0x80) & (n > 0)
            out[negative] = 0xFF
            for j in range(min(int(n.max()), 16)):
                sel = np.flatnonzero(n > j)
                out[sel, j] = ctx.buf[end[sel] - 1 - j]
        arr = pa.Array.from_buffers(self.type, len(n), [None, pa.py_buffer(out)])
        return arr, end


class _Enum(_Varint):
    def __init__(self, writer: _S, reader: _S):
        self.type = pa.string()
        self.symbols = _strings(reader.symbols)
        default = reader.symbols.index(reader.enum_default) \
            if reader.enum_default in reader.symbols else -1
        self.table = np.array([reader.symbols.index(s) if s in reader.symbols else default
                               for s in writer.symbols] or [0], dtype=np.int64)
        self.writer_symbols = writer.symbols

    def decode(self, ctx, pos, rows):
        i, pos = _ints(ctx, pos, rows)
        if len(i) and (i.min() < 0 or i.max() >= len(self.writer_symbols)):
            bad = (i < 0) | (i >= len(self.writer_symbols))
            ctx.fail(rows[bad], f"an enum index is outside the writer's "
                                f"{len(self.writer_symbols)} symbols")
            i = np.where(bad, 0, i)
        r = self.table[i]
        if len(r) and r.min() < 0:
            bad = r < 0
            first = self.writer_symbols[int(i[np.argmax(bad)])]
            ctx.fail(rows[bad], f"the enum symbol {first!r} (or another) is not in the reader's "
                                "enum, which has no default")
            r = np.where(bad, 0, r)
        return self.symbols.take(numbers_array(r, pa.int64(), np.int64)), pos


def _strings(values: list[str]) -> pa.Array:
    """A string array from a list, built from buffers (see ``numbers_array`` on pandas)."""
    raw = [v.encode() for v in values]
    offsets = np.zeros(len(raw) + 1, dtype=np.int32)
    np.cumsum([len(r) for r in raw], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(raw),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(raw))])


class _Const(_Dec):
    """A reader field the writer lacks: its default, repeated (reads no bytes)."""

    min_size = 0
    fixed = 0

    def __init__(self, value: pa.Array):
        self.value, self.type = value, value.type

    def decode(self, ctx, pos, rows):
        return self.value.take(numbers_array(np.zeros(len(pos), np.int64), pa.int64(),
                                             np.int64)), pos


class _Cast(_Dec):
    """A decoder's output cast to a wider Arrow type (an int branch in an int/long column)."""

    def __init__(self, inner: _Dec, out: pa.DataType):
        self.inner, self.type, self.min_size = inner, out, inner.min_size
        self.fixed = inner.fixed

    def skip(self, ctx, pos, rows):
        return self.inner.skip(ctx, pos, rows)

    @property
    def has_skip1(self):
        return self.inner.has_skip1

    def skip1(self, mv, at):
        return self.inner.skip1(mv, at)

    def decode(self, ctx, pos, rows):
        arr, pos = self.inner.decode(ctx, pos, rows)
        return arr.cast(self.type), pos


def _struct(children: list[pa.Array], fields: list[pa.Field], n: int,
            mask: np.ndarray | None = None) -> pa.Array:
    validity = None
    if mask is not None and mask.any():
        validity = pa.py_buffer(np.packbits(~mask, bitorder="little"))
    return pa.StructArray.from_buffers(pa.struct(fields), n, [validity], children=children)


class _Record(_Dec):
    def __init__(self, steps: list[_Dec], out: list[tuple[int, _Dec | None]],
                 fields: list[pa.Field]):
        self.steps = steps      # one per writer field, in the writer's order
        self.out = out          # per reader field: (writer field index, None) or (-1, default)
        self.fields = fields
        self.type = pa.struct(fields)
        self.kept = {j for j, const in out if const is None}  # writer fields the reader reads
        self.min_size = sum(s.min_size for s in steps)
        sizes = [s.fixed for s in steps]
        self.fixed = None if None in sizes else sum(sizes)

    @property
    def has_skip1(self):
        return all(step.has_skip1 for step in self.steps)

    def skip1(self, mv, at):
        for step in self.steps:
            at = step.skip1(mv, at)
        return at

    def skip(self, ctx, pos, rows):
        if self.fixed is not None:
            return pos + self.fixed
        for step in self.steps:
            pos = step.skip(ctx, pos, rows)
            ctx.clamp(pos, rows)
        return pos

    def decode(self, ctx, pos, rows):
        cols: list[pa.Array | None] = []
        for j, step in enumerate(self.steps):
            if j in self.kept:
                arr, pos = step.decode(ctx, pos, rows)
            else:  # a field the reader drops is only read past
                arr, pos = None, step.skip(ctx, pos, rows)
            ctx.clamp(pos, rows)
            cols.append(arr)
        children = [cols[j] if const is None else const.decode(ctx, pos, rows)[0]
                    for j, const in self.out]
        return _struct(children, self.fields, len(pos)), pos


def _scatter(n: int, pieces: list[tuple[np.ndarray, pa.Array]], t: pa.DataType) -> pa.Array:
    """One column of ``n`` from values decoded for subsets (``sel`` indices), null elsewhere.
    One subset of a fixed-width or binary column (a nullable field) is spread by numpy, its
    data reused; the rest by one take."""
    if not pieces:
        return pa.nulls(n, t)
    if len(pieces) == 1 and len(pieces[0][0]) == n:
        return pieces[0][1]
    if len(pieces) == 1:
        sel, arr = pieces[0]
        spread = _spread(n, sel, arr)
        if spread is not None:
            return spread
    at = np.full(n, -1, dtype=np.int64)
    start = 0
    for sel, arr in pieces:
        at[sel] = np.arange(start, start + len(sel))
        start += len(sel)
    values = pieces[0][1] if len(pieces) == 1 else pa.concat_arrays([a for _, a in pieces])
    return values.take(_indices(at, at >= 0))


def _spread(n: int, sel: np.ndarray, arr: pa.Array) -> pa.Array | None:
    """``arr``'s values at rows ``sel`` of a column of ``n``, null elsewhere, without a take:
    fixed-width values are scattered by numpy, binary values keep their data (only the offsets
    are spread). None for other types, or values that have nulls of their own."""
    t = arr.type
    if arr.null_count or arr.offset:
        return None
    valid = np.zeros(n, dtype=bool)
    valid[sel] = True
    validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = n - len(sel)
    if pa.types.is_binary(t) or pa.types.is_string(t):
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1)
        lens = np.zeros(n + 1, dtype=np.int32)
        lens[sel + 1] = np.diff(offsets)
        lens[0] = offsets[0]
        np.cumsum(lens, out=lens)
        return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(lens), arr.buffers()[2]],
                                     null_count=nulls)
    if pa.types.is_boolean(t) or not (pa.types.is_primitive(t) or pa.types.is_decimal(t)):
        return None
    width = t.bit_width // 8
    src = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=len(arr) * width)
    out = np.zeros((n, width), dtype=np.uint8)
    out[sel] = src.reshape(len(arr), width)
    return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(out)], null_count=nulls)


@dataclass
class _Branch:
    slot: int                  # output slot (a struct member, or 0), -1 for null
    dec: _Dec | None = None
    error: str | None = None   # a writer branch the reader cannot read: an error row


class _Union(_Dec):
    """A writer union (reads the branch index) or a writer non-union read as a reader union
    (``reads_index`` False, one branch). Output per Spark's representation of the reader."""

    def __init__(self, branches: list[_Branch], rep: str, out: pa.DataType, reads_index: bool):
        self.branches, self.rep, self.type, self.reads_index = branches, rep, out, reads_index
        self.min_size = 1 if reads_index else branches[0].dec.min_size

    @property
    def has_skip1(self):
        return all(b.dec is None or b.dec.has_skip1 for b in self.branches)

    def skip1(self, mv, at):
        if not self.reads_index:
            return self.branches[0].dec.skip1(mv, at)
        i, at = _varint1(mv, at)
        if not 0 <= i < len(self.branches) or self.branches[i].error is not None:
            raise _Bad
        dec = self.branches[i].dec
        return at if dec is None else dec.skip1(mv, at)

    def skip(self, ctx, pos, rows):
        if not self.reads_index:
            return self.branches[0].dec.skip(ctx, pos, rows)
        idx, pos = _longs(ctx, pos, rows)
        for b, branch in enumerate(self.branches):
            if branch.dec is None or branch.dec.fixed == 0:
                continue  # null, or a branch the decode pass reports
            sel = np.flatnonzero(idx == b)
            if len(sel):
                pos[sel] = branch.dec.skip(ctx, pos[sel], rows[sel])
        return pos

    def decode(self, ctx, pos, rows):
        n = len(pos)
        if self.reads_index:
            idx, pos = _longs(ctx, pos, rows)
            if n and (idx.min() < 0 or idx.max() >= len(self.branches)):
                ctx.fail(rows[(idx < 0) | (idx >= len(self.branches))],
                         f"a union branch index is outside the union's {len(self.branches)}")
        else:
            idx = np.zeros(n, dtype=np.int64)
        pos = pos.copy()
        pieces: dict[int, list[tuple[np.ndarray, pa.Array]]] = {}
        for b, branch in enumerate(self.branches):
            sel = np.flatnonzero(idx == b) if len(self.branches) > 1 or self.reads_index \
                else np.arange(n)
            if not len(sel):
                continue
            if branch.error is not None:
                ctx.fail(rows[sel], branch.error)
                continue
            if branch.slot < 0:
                continue
            arr, p = branch.dec.decode(ctx, pos[sel], rows[sel])
            pos[sel] = p
            pieces.setdefault(branch.slot, []).append((sel, arr))
        if self.rep == "null":
            return pa.nulls(n), pos
        if self.rep == "single":
            return _scatter(n, pieces.get(0, []), self.type), pos
        fields = list(self.type)
        valid = np.zeros(n, dtype=bool)
        for ps in pieces.values():
            for sel, _ in ps:
                valid[sel] = True
        children = [_scatter(n, pieces.get(i, []), f.type) for i, f in enumerate(fields)]
        return _struct(children, fields, n, ~valid), pos


class _Array(_Dec):
    """Arrays (``key`` None) and maps, in two passes. The first finds where every item starts:
    blocks are read for all values at once; inside a block, pass k skips the k-th item of every
    value that has more than k (values sorted by count, so each pass takes a prefix), or, for
    items of one fixed size, all items at once. The second decodes all items in one call, from
    their starts put in value order by one numpy scatter."""

    def __init__(self, item: _Dec, key: _Dec | None, out: pa.DataType):
        self.item, self.key, self.type = item, key, out
        self.item_min = item.min_size + (1 if key is not None else 0)
        self.item_fixed = None if key is not None else item.fixed
        self.item_varint = key is None and isinstance(item, _Varint)
        self.scalar = item.has_skip1 and (key is None or key.has_skip1)

    def skip(self, ctx, pos, rows):
        return self._walk(ctx, pos, rows, False)[0]

    def _walk(self, ctx: _Ctx, pos: np.ndarray, rows: np.ndarray, collect: bool
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(positions after each value, item counts, item starts in value order if asked)."""
        n = len(pos)
        pos = pos.copy()
        lens = np.zeros(n, dtype=np.int64)
        owner: list[np.ndarray] = []
        ordinal: list[np.ndarray] = []
        starts: list[np.ndarray] = []
        active = np.arange(n)
        while len(active):
            c, p = _longs(ctx, pos[active], rows[active])
            neg = np.flatnonzero(c < 0)
            if len(neg):  # a negative count is followed by the block's size in bytes
                c[neg] = -c[neg]
                p[neg] = _skip_varints(ctx, p[neg], rows[active[neg]])
            room = np.maximum(ctx.ends[rows[active]] - p, 0)
            limit = room // self.item_min if self.item_min else np.full(len(p), _MAX_ITEMS)
            if len(c) and ((c > limit) | (c < 0)).any():  # -2**63 stays negative
                bad = (c > limit) | (c < 0)
                ctx.fail(rows[active[bad]], "an array or map block declares more items than "
                                            "its datum holds")
                c[bad] = 0
            done = c == 0
            pos[active[done]] = p[done]
            go = np.flatnonzero(~done)
            if not len(go):
                break
            act, c, p = active[go], c[go], p[go]
            if self.item_fixed is not None or self.item_varint and int(c.max()) > _SCAN_MIN:
                first = np.cumsum(c) - c
                own = np.repeat(np.arange(len(act)), c)
                k = np.arange(len(own)) - first[own]
                if self.item_fixed is not None:
                    at = p[own] + k * self.item_fixed
                    p = p + c * self.item_fixed
                else:
                    at, p = self._varint_items(ctx, rows[act], p, c, first, own, k)
                if collect:
                    owner.append(act[own])
                    ordinal.append(lens[act][own] + k)
                    starts.append(at)
            else:
                order = np.argsort(-c, kind="stable")
                act, c, p = act[order], c[order], p[order]
                neg_c = -c
                for k in range(int(c[0])):
                    m = int(np.searchsorted(neg_c, -k, side="left"))
                    if m <= _FEW_ROWS and int(c[0]) - k > _FEW_ROWS_ITEMS and self.scalar:
                        self._few(ctx, rows, act[:m], c[:m], p[:m], k, lens, collect,
                                  owner, ordinal, starts)
                        break
                    sub = act[:m]
                    r = rows[sub]
                    pp = p[:m]
                    if collect:
                        owner.append(sub)
                        ordinal.append(lens[sub] + k)
                        starts.append(pp.copy())
                    if self.key is not None:
                        pp = self.key.skip(ctx, pp, r)
                    pp = self.item.skip(ctx, pp, r)
                    ctx.clamp(pp, r)
                    p[:m] = pp
            lens[act] += c
            pos[act] = p
            active = act
        if not collect:
            return pos, lens, None
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        at = np.empty(int(offsets[-1]), dtype=np.int64)
        if starts:
            at[offsets[np.concatenate(owner)] + np.concatenate(ordinal)] = np.concatenate(starts)
        return pos, lens, at

    def _few(self, ctx: _Ctx, rows: np.ndarray, act: np.ndarray, c: np.ndarray, p: np.ndarray,
             k0: int, lens: np.ndarray, collect: bool, owner: list, ordinal: list,
             starts: list) -> None:
        """The items from ``k0`` on of the few values still going, skipped in plain Python:
        a numpy pass per item costs microseconds for one value's item, this a fraction. (A
        value with thousands of string or record items; only then.)"""
        mv = memoryview(ctx.buf)
        for j in range(len(act)):
            at, end, count = int(p[j]), int(ctx.ends[rows[act[j]]]), int(c[j])
            found: list[int] = []
            try:
                for _ in range(k0, count):
                    found.append(at)
                    if self.key is not None:
                        at = self.key.skip1(mv, at)
                    at = self.item.skip1(mv, at)
                    if at > end:
                        raise _Bad
            except (_Bad, IndexError):
                ctx.fail(rows[act[j:j + 1]], "an array or map item does not parse (truncated "
                                             "or corrupt data)")
                found += [end] * (count - k0 - len(found))
                at = end
            p[j] = at
            if collect:
                owner.append(np.full(len(found), act[j], dtype=np.int64))
                ordinal.append(np.arange(k0, count, dtype=np.int64) + lens[act[j]])
                starts.append(np.array(found, dtype=np.int64))

    @staticmethod
    def _varint_items(ctx: _Ctx, rows: np.ndarray, p: np.ndarray, c: np.ndarray,
                      first: np.ndarray, own: np.ndarray, k: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Where the varint items of long blocks start (and each block's end), all at once: a
        varint ends at a byte under 0x80, so item k of a block ends at the k-th such byte from
        the block's start. (Passes over the item index would cost one numpy call per item.)"""
        lo, hi = int(p.min()), int(ctx.ends[rows].max())
        stops = np.flatnonzero(ctx.buf[lo:hi] < 0x80) + lo
        at_stop = np.searchsorted(stops, p)
        short = np.flatnonzero(c > len(stops) - at_stop)
        if len(short):  # the data ends inside the block: its items read from the end
            ctx.fail(rows[short], "an array's items run past the end of its datum")
            stops = np.append(stops, np.full(int(c.max()), ctx.total, dtype=stops.dtype))
        ends = stops[at_stop[own] + k] + 1
        starts = np.empty_like(ends)
        starts[1:] = ends[:-1]
        starts[first] = p
        long_ = ends - starts > 10
        if long_.any():
            ctx.fail(rows[own[long_]], "a varint runs past 10 bytes or 64 bits")
        return starts, ends[first + c - 1]

    def decode(self, ctx, pos, rows):
        pos, lens, at = self._walk(ctx, pos, rows, True)
        n = len(pos)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lens, out=offsets[1:])
        item_rows = np.repeat(rows, lens)
        keys = None
        if self.key is not None:
            keys, at = self.key.decode(ctx, at, item_rows)
            if keys.null_count:  # a key that is not UTF-8 (its row is an error row): ""
                keys = pa.Array.from_buffers(pa.string(), len(keys), [None, *keys.buffers()[1:]],
                                             offset=keys.offset)
        values, _ = self.item.decode(ctx, at, item_rows)
        off = numbers_array(offsets, pa.int32(), np.int32)
        if self.key is None:
            return pa.ListArray.from_arrays(off, values, type=self.type), pos
        return pa.MapArray.from_arrays(off, keys, values, type=self.type), pos


# --------------------------------------------------------------------------- resolution

_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
               ("long", "double"), ("float", "double"), ("string", "bytes"), ("bytes", "string")}


def _names_match(w: _S, r: _S) -> bool:
    short = {r.short_name} | {a.rsplit(".", 1)[-1] for a in r.aliases}
    return w.short_name in short


def _matches(w: _S, r: _S, promote: bool) -> bool:
    """Whether a writer branch selects this reader union branch (the specification's rule)."""
    if w.kind in _NAMED or w.kind == "record":
        return w.kind == r.kind and _names_match(w, r)
    if w.kind == r.kind:
        return True
    return promote and (w.kind, r.kind) in _PROMOTIONS


def _time_scale(r: _S) -> int:
    return 1000 if r.logical in ("timestamp-millis", "local-timestamp-millis") else 1


def _resolve(w: _S, r: _S, path: str, seen: tuple[str, ...] = ()) -> _Dec:
    """The decoder reading writer ``w`` as reader ``r`` (AvroSchemaError if it cannot)."""
    if r.kind == "union":
        return _to_union(w, r, path, seen)
    if w.kind == "union":
        branches = []
        for b in w.branches:
            try:
                branches.append(_Branch(0, _resolve(b, r, path, seen)))
            except AvroSchemaError as e:
                branches.append(_Branch(-1, error=f"{path or 'the value'}: the writer's union "
                                                  f"branch {b.kind} does not resolve ({e})"))
        return _Union(branches, "single", _arrow(r)[0], True)
    out = _arrow(r, seen)[0]
    wk, rk = w.kind, r.kind
    if wk != rk and (wk, rk) not in _PROMOTIONS:
        raise AvroSchemaError(f"{path or 'the value'}: the writer's {wk} cannot be read as the "
                              f"reader's {rk}")
    if rk == "null":
        return _Null()
    if rk == "boolean":
        return _Bool()
    if rk in ("int", "long") or (rk in ("float", "double") and wk in ("int", "long")):
        return _Number(wk, out, _time_scale(r))
    if rk in ("float", "double"):
        return _Float(wk, out)
    if w.logical == "decimal" and r.logical == "decimal" and w.scale != r.scale:
        raise AvroSchemaError(f"{path or 'the value'}: the writer's decimal has scale {w.scale} "
                              f"and the reader's {r.scale}; Avro reads a decimal only at its "
                              "own scale")
    if rk in ("string", "bytes"):
        if r.logical == "decimal":
            return _Decimal(None, r.precision, r.scale)
        return _Bytes(rk == "string")
    if not _names_match(w, r):
        raise AvroSchemaError(f"{path or 'the value'}: the writer's {wk} {w.name!r} and the "
                              f"reader's {r.name!r} have different names (and no alias joins them)")
    if rk == "fixed":
        if w.size != r.size:
            raise AvroSchemaError(f"{path or 'the value'}: fixed {w.name!r} has {w.size} bytes "
                                  f"in the writer's schema and {r.size} in the reader's")
        return _Decimal(r.size, r.precision, r.scale) if r.logical == "decimal" \
            else _Fixed(r.size)
    if rk == "enum":
        return _Enum(w, r)
    if rk in ("array", "map"):
        item = _resolve(w.items, r.items, f"{path}[]", seen)
        return _Array(item, _Bytes(True) if rk == "map" else None, out)
    return _record(w, r, path, seen)


def _record(w: _S, r: _S, path: str, seen: tuple[str, ...]) -> _Dec:
    if r.name in seen:
        raise AvroSchemaError(f"the Avro record {r.name!r} contains itself; Spark has no column "
                              "type for a recursive record")
    seen = seen + (r.name,)
    by_name = {f.name: i for i, f in enumerate(w.fields)}
    steps: list[_Dec | None] = [None] * len(w.fields)
    out: list[tuple[int, _Dec | None]] = []
    fields = []
    for f in r.fields:
        where = f"{path}.{f.name}" if path else f.name
        j = next((by_name[n] for n in (f.name, *f.aliases) if n in by_name), -1)
        t, nullable = _arrow(f.type, seen)
        fields.append(pa.field(f.name, t, nullable))
        if j >= 0:
            steps[j] = _resolve(w.fields[j].type, f.type, where, seen)
            out.append((j, None))
        elif f.default is _NO_DEFAULT:
            raise AvroSchemaError(f"{where}: the reader's field is not in the writer's schema and "
                                  "has no default")
        else:
            out.append((-1, _Const(_default(f.type, f.default, t, where))))
    for j, wf in enumerate(w.fields):
        if steps[j] is None:  # a writer field the reader drops: read past it
            steps[j] = _resolve(wf.type, wf.type, f"{path}.{wf.name}", seen)
    return _Record(steps, out, fields)


def _to_union(w: _S, r: _S, path: str, seen: tuple[str, ...]) -> _Dec:
    rep = _union_rep(r)
    out = _arrow(r, seen)[0]
    nn = _nn(r)
    has_null = len(nn) < len(r.branches)

    def target(b: _S) -> _Branch:
        if b.kind == "null":
            if has_null:
                return _Branch(-1)
            return _Branch(-1, error=f"{path or 'the value'}: null, and the reader's union has "
                                     "no null")
        for promote in (False, True):
            for i, rb in enumerate(nn):
                if _matches(b, rb, promote):
                    dec = _resolve(b, rb, path, seen)
                    slot = i if rep == "struct" else 0
                    if rep == "single" and dec.type != out:
                        dec = _Cast(dec, out)
                    return _Branch(slot, dec)
        return _Branch(-1, error=f"{path or 'the value'}: the writer's {b.kind} matches no "
                                 "branch of the reader's union")

    if w.kind == "union":
        return _Union([target(b) for b in w.branches], rep, out, True)
    branch = target(w)
    if branch.error is not None:
        raise AvroSchemaError(branch.error)
    if branch.slot < 0:
        return _Null() if rep == "null" else _Const(pa.nulls(1, out))
    return _Union([branch], rep, out, False)


def _default(s: _S, value: Any, t: pa.DataType, where: str) -> pa.Array:
    """A reader field's default (Avro JSON) as a one-value Arrow array of its type."""
    try:
        return pa.array([_py_default(s, value)], type=t)
    except (TypeError, ValueError, KeyError, IndexError, pa.ArrowException) as e:
        raise AvroSchemaError(f"{where}: the default {json.dumps(value)[:100]} does not fit the "
                              f"field's type ({e})") from None


def _py_default(s: _S, v: Any) -> Any:
    k = s.kind
    if k == "union":
        first = s.branches[0]  # a union's default is for its first branch
        if first.kind == "null" or v is None:
            return None
        value = _py_default(first, v)
        if _union_rep(s) == "struct":
            return {f"member{_nn(s).index(first)}": value}
        return value
    if k in ("bytes", "fixed"):
        raw = v.encode("latin-1")
        if s.logical == "decimal":
            return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-s.scale)
        return raw
    if k == "long" and s.logical:
        return v * _time_scale(s)
    if k == "array":
        return [_py_default(s.items, x) for x in v]
    if k == "map":
        return [(key, _py_default(s.items, x)) for key, x in v.items()]
    if k == "record":
        return {f.name: _py_default(f.type, v.get(f.name, f.default)) for f in s.fields}
    if k == "enum" and v not in s.symbols:
        raise ValueError(f"{v!r} is not a symbol of the enum")
    return v


# --------------------------------------------------------------------------- encoding

@dataclass
class _Plan:
    """One column's encoding: bytes per value (0 where not written) and how to write them.

    ``word``, where set, holds each value's whole encoding (at most 8 bytes) as one
    little-endian word, zero past its size and for values not written: such plans of
    neighbouring fields (a record's, a map entry's key and value, a union's branch behind its
    tag) are joined into one word (:func:`_fused`), so each value costs one store, not one per
    field, and a list of them stores each item in one assignment."""

    sizes: np.ndarray
    write: Any  # (out: _Out, at: int64 positions, one per value) -> None
    word: np.ndarray | None = None


def _word_plan(word: np.ndarray, sizes: np.ndarray) -> _Plan:
    """The plan of values given whole by ``word`` (see :class:`_Plan`)."""

    def write(out: _Out, at: np.ndarray, limit: np.ndarray) -> None:
        if sizes.all():
            out.put(at, word, sizes, limit, clean=True)
            return
        idx = np.flatnonzero(sizes)
        if len(idx):
            out.put(at[idx], word[idx], sizes[idx], limit[idx], clean=True)

    return _Plan(sizes, write, word)


def _fused(plans: list[_Plan]) -> list[_Plan]:
    """``plans`` (values laid one after the other) with each run of word plans whose values
    together stay within 8 bytes joined into one word plan."""
    out: list[_Plan] = []
    run: list[_Plan] = []

    def close() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            word, sizes = run[0].word.copy(), run[0].sizes.copy()
            for p in run[1:]:
                word |= p.word << (sizes.astype(np.uint64) << np.uint64(3))
                sizes += p.sizes
            out.append(_word_plan(word, sizes))
        run.clear()

    total: np.ndarray | None = None
    for p in plans:
        if p.word is None:
            close()
            out.append(p)
            total = None
            continue
        if run and total is not None and int((total + p.sizes).max(initial=0)) <= 8:
            run.append(p)
            total = total + p.sizes
            continue
        close()
        run.append(p)
        total = p.sizes
    close()
    return out


class _Out:
    """The output buffer, written 8 bytes at a time through a word view at every byte.

    Values are written in order: a field for all rows, then the next field; an array's count,
    then its items' first field for all items, then the next field. So a word may run past its
    value (up to 8 bytes) where it stays below the value's ``limit``: the end of the array item
    or row it is in (the rest of which is written later). Values closer to their limit merge
    their word: the bytes past the value are read first and written back unchanged. In one
    numpy assignment the values (in memory order) are stored one after the other, so a byte is
    last written by the value it belongs to, and bytes of no value in the assignment keep what
    they held."""

    def __init__(self, buf: np.ndarray):
        self.buf = buf
        self.w64 = np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))

    def put(self, at: np.ndarray, words: np.ndarray, sizes: np.ndarray | int,
            limit: np.ndarray, clean: bool = False) -> None:
        """Write the first ``sizes`` (at most 8) bytes of each word at ``at``; ``clean`` words
        are zero past them."""
        free = at + 8 <= limit
        if free.all():
            self.w64[at] = words
            return
        tight = np.flatnonzero(~free)
        if len(tight) < len(at):
            loose = np.flatnonzero(free)
            self.w64[at[loose]] = words[loose]
            at, words = at[tight], words[tight]
            if not isinstance(sizes, int):
                sizes = sizes[tight]
        keep = _KEEP[np.minimum(sizes, 8)] if not isinstance(sizes, int) else _KEEP[sizes]
        old = self.w64[at]
        old &= keep
        old |= words if clean else words & ~keep
        self.w64[at] = old


# Continuation bits of a varint of each size (0 to 10 bytes) in its first 8 bytes.
_CONT = np.array([0] + [((1 << (8 * (k - 1))) - 1) & 0x8080808080808080 for k in range(1, 9)]
                 + [0x8080808080808080] * 2, dtype=np.uint64)
_KEEP = np.array([2**64 - 1 - ((1 << (8 * k)) - 1) for k in range(8)] + [0], dtype=np.uint64)
_WORD_COPY_MAX = 4096  # longer values are copied byte-wise: fewer numpy passes
_U56 = np.uint64((1 << 56) - 1)
_SPREAD = [(np.uint64(0x000000000FFFFFFF), np.uint64(0x00FFFFFFF0000000), np.uint64(4)),
           (np.uint64(0x00003FFF00003FFF), np.uint64(0x0FFFC0000FFFC000), np.uint64(2)),
           (np.uint64(0x007F007F007F007F), np.uint64(0x3F803F803F803F80), np.uint64(1))]


class _Varints:
    """Unsigned varints of a column: their sizes, and their first 8 bytes as one little-endian
    word each (7-bit groups spread to bytes, continuation bits set: the inverse of the
    decoder's SWAR), so that a spilling write is one 8-byte store per value."""

    def __init__(self, u: np.ndarray):
        self.u = u
        top = int(u.max()) if len(u) else 0
        if top < 0x80:  # one byte each (small numbers, lengths, counts, union branches)
            self.sizes = np.ones(len(u), dtype=np.int64)
            self.words = u
            return
        self.sizes = uvarint_sizes(u)
        if top < 1 << 14:  # at most two bytes
            x = u & np.uint64(0x3F80)
            x <<= _ONE
            x |= u & np.uint64(0x7F)
            x |= (u > np.uint64(0x7F)).view(np.uint8).astype(np.uint64) << _U7
            self.words = x
            return
        x = u & _U56
        t = np.empty_like(x)
        for keep, move, shift in _SPREAD:
            np.bitwise_and(x, move, out=t)
            t <<= shift
            x &= keep
            x |= t
        x |= _CONT.take(self.sizes)
        self.words = x

    def write(self, out: _Out, at: np.ndarray, idx: np.ndarray | None,
              limit: np.ndarray) -> None:
        """Write the varints of values ``idx`` (None: all) at ``at`` (one per value)."""
        words, sizes, u = self.words, self.sizes, self.u
        if idx is not None:
            words, sizes, u, at, limit = words[idx], sizes[idx], u[idx], at[idx], limit[idx]
        if not len(at):
            return
        out.put(at, words, sizes, limit, clean=True)
        long_ = np.flatnonzero(sizes > 8)
        if len(long_):  # bytes 9 and 10 of values from 2**56 on
            v, a = u[long_], at[long_]
            ten = sizes[long_] > 9
            out.buf[a + 8] = ((v >> np.uint64(56)) & np.uint64(0x7F)).astype(np.uint8) \
                | (ten.astype(np.uint8) << 7)
            out.buf[a[ten] + 9] = (v[ten] >> np.uint64(63)).astype(np.uint8)


class _Enc:
    """One encode call: errors found (top-level rows) and the path of the value being planned."""

    def __init__(self) -> None:
        self.errors: list[tuple[np.ndarray, str]] = []

    def fail(self, rows: np.ndarray, message: str) -> None:
        if len(rows):
            self.errors.append((rows, message))


def _bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(buf, dtype=np.uint8), count=offset + n,
                         bitorder="little")[offset:].view(np.bool_)


def _valid(arr: pa.Array) -> np.ndarray | None:
    """Which values are not null (None: all), from the validity bitmap."""
    if arr.null_count == 0:
        return None
    if pa.types.is_null(arr.type) or arr.buffers()[0] is None:  # no bitmap: nulls by type
        return ~np.asarray(_bits(arr.is_null().buffers()[1], 0, len(arr)))
    return _bits(arr.buffers()[0], arr.offset, len(arr))


def _numbers(arr: pa.Array, dtype: type) -> np.ndarray:
    """A fixed-width column's values (anything where null) as ``dtype``, read from its buffer:
    ``to_numpy`` would import pandas in a worker (see ``numbers_array``)."""
    t = arr.type
    if pa.types.is_boolean(t):
        return _bits(arr.buffers()[1], arr.offset, len(arr)).astype(dtype, copy=False)
    if pa.types.is_floating(t):
        kind = {16: np.float16, 32: np.float32, 64: np.float64}[t.bit_width]
    else:
        kind = np.dtype(f"{'u' if pa.types.is_unsigned_integer(t) else 'i'}{t.bit_width // 8}")
    raw = np.frombuffer(arr.buffers()[1], dtype=kind, count=arr.offset + len(arr))[arr.offset:]
    return raw.astype(dtype, copy=False)


def _uvarint_plan(u: np.ndarray, present: np.ndarray, extra: np.ndarray | int = 0,
                  then: Any = None) -> _Plan:
    """A varint per value (where present), then ``extra`` bytes written by ``then``."""
    v = _Varints(u)
    sizes = np.where(present, v.sizes + extra, 0)
    if then is None and isinstance(extra, int) and extra == 0 and \
            int(v.sizes.max(initial=0)) <= 8:
        return _word_plan(np.where(present, v.words, np.uint64(0)), sizes)
    idx = None if present.all() else np.flatnonzero(present)

    def write(out: _Out, at: np.ndarray, limit: np.ndarray) -> None:
        v.write(out, at, idx, limit)
        if then is not None:
            then(out, at + v.sizes, limit)

    return _Plan(sizes, write)


def _time_values(arr: pa.Array, s: _S) -> np.ndarray:
    """int64 values of a date/time/timestamp column in the unit of the schema's logical type."""
    t = arr.type
    if pa.types.is_timestamp(t):
        per_s = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}[t.unit]
        want = 1000 if _time_scale(s) == 1000 else 1_000_000
        v = _numbers(arr.view(pa.int64()), np.int64)
        if per_s < want:
            return v * (want // per_s)
        return np.floor_divide(v, per_s // want)
    if pa.types.is_date64(t):  # milliseconds of whole days
        return np.floor_divide(_numbers(arr.view(pa.int64()), np.int64), 86_400_000)
    if pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_duration(t):
        return _numbers(arr.view(pa.int32() if t.bit_width == 32 else pa.int64()), np.int64)
    return _numbers(arr, np.int64)


def _plan(s: _S, arr: pa.Array, present: np.ndarray, rows: np.ndarray, enc: _Enc,
          path: str) -> _Plan:
    """The encoding of ``arr`` (values where ``present``) with writer schema ``s``."""
    n = len(arr)
    k = s.kind
    where = path or "the value"
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if k == "union":
        return _union_plan(s, arr, present, rows, enc, path)
    valid = _valid(arr)
    if k == "null":
        return _Plan(np.zeros(n, dtype=np.int64), lambda out, at, limit: None,
                     np.zeros(n, dtype=np.uint64))
    if valid is not None:
        missing = present & ~valid
        if missing.any():
            enc.fail(rows[missing], f"{where}: null, and the schema's {k} is not nullable")
            present = present & valid
    if k == "boolean":
        v = _numbers(arr, np.bool_) & present
        return _word_plan(v.astype(np.uint64), present.astype(np.int64))
    if k in ("int", "long"):
        v = _time_values(arr, s)
        if k == "int" and len(v) and (v.min() < -2**31 or v.max() >= 2**31):
            bad = present & ((v < -2**31) | (v >= 2**31))
            enc.fail(rows[bad], f"{where}: a value beyond the 32 bits of an Avro int")
            present = present & ~bad
        return _uvarint_plan(zigzag(v), present)
    if k in ("float", "double"):
        dtype, bits = (np.float32, np.uint32) if k == "float" else (np.float64, np.uint64)
        word = np.where(present, _numbers(arr, dtype).view(bits), 0).astype(np.uint64)
        return _word_plan(word, present * np.dtype(dtype).itemsize)
    if s.logical == "decimal":
        return _decimal_plan(s, arr, present, rows, enc, where)
    if k in ("string", "bytes", "fixed"):
        if pa.types.is_fixed_size_binary(arr.type) or pa.types.is_binary_view(arr.type) \
                or pa.types.is_string_view(arr.type):
            arr = arr.cast(pa.binary())
        if not (pa.types.is_binary(arr.type) or pa.types.is_string(arr.type)
                or pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)):
            raise AvroSchemaError(f"{where}: a {arr.type} column cannot be written as Avro {k}")
        if k == "string" and (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
            bad = _not_utf8(arr)  # one C++ pass when all are UTF-8
            if len(bad):  # Avro strings are UTF-8: binary values that are not are error rows
                enc.fail(rows[bad[present[bad]]], f"{where}: a value that is not UTF-8, for "
                                                  "an Avro string")
                present = present.copy()
                present[bad] = False
        offsets, data = _offsets_and_data(arr)
        lens = np.where(present, offsets[1:] - offsets[:-1], 0)
        if k == "fixed":
            wrong = present & (lens != s.size)
            if wrong.any():
                enc.fail(rows[wrong], f"{where}: a value of other than the fixed size {s.size}")
                present = present & ~wrong
                lens = np.where(present, lens, 0)

            def write_fixed(out, at, limit):
                _copy_bytes(out, at, offsets, lens, data, limit)

            return _Plan(lens.copy(), write_fixed)
        if len(lens) and int(lens.max()) < 64:
            return _short_bytes_plan(offsets, data, lens, present)
        return _uvarint_plan(zigzag(lens), present, lens,
                             lambda out, at, limit: _copy_bytes(out, at, offsets, lens, data,
                                                                limit))
    if k == "enum":
        symbols = _strings(s.symbols)
        import pyarrow.compute as pc

        idx = pc.index_in(arr, value_set=symbols)
        known = _valid(idx)
        if known is not None:
            unknown = present & ~known
            if unknown.any():
                enc.fail(rows[unknown], f"{where}: a value that is not a symbol of the enum "
                                        f"{s.name!r}")
                present = present & known
        return _uvarint_plan(_numbers(idx, np.int64).astype(np.uint64) << _ONE, present)
    if k == "record":
        return _record_plan(s, arr, present, rows, enc, path)
    return _list_plan(s, arr, present, rows, enc, path)


# Mask of the low k bytes of a word, k from 0 to 8.
_LOW = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)


def _words_at(data: np.ndarray) -> np.ndarray:
    """The 8 bytes from each position of ``data`` (and one past it) as a little-endian word:
    bytes past the end read as 0."""
    padded = np.zeros(len(data) + 16, dtype=np.uint8)
    padded[:len(data)] = data
    return np.ndarray(shape=(len(data) + 9,), dtype="<u8", buffer=padded, strides=(1,))


def _short_bytes_plan(offsets: np.ndarray, data: np.ndarray, lens: np.ndarray,
                      present: np.ndarray) -> _Plan:
    """Strings or bytes of under 64 bytes (a length varint of one byte): the length and the
    first 7 bytes as one word; the rest, if any, copied after it. Values of at most 7 bytes
    are then word plans."""
    src64 = _words_at(data)
    head = np.minimum(lens, 7)
    first = src64[offsets[:-1]]
    if int(lens.min()) < 7:  # else the shift drops the 8th byte, the only one not the value's
        first &= _LOW[head]
    first <<= np.uint64(8)
    first |= lens.astype(np.uint64) << _ONE
    word = first
    head_sizes = head + 1 if present.all() else np.where(present, head + 1, 0)
    if int(lens.max(initial=0)) <= 7:
        return _word_plan(word, head_sizes)
    heads = _word_plan(word, head_sizes)
    rest = lens - head
    rest_from = offsets[:-1] + 7

    def write(out, at, limit):
        heads.write(out, at, limit)
        _copy_bytes(out, at + 8, rest_from, rest, data, limit, src64)

    return _Plan(np.where(present, lens + 1, 0), write)


def _copy_bytes(out: _Out, at: np.ndarray, offsets: np.ndarray, lens: np.ndarray,
                data: np.ndarray, limit: np.ndarray, src64: np.ndarray | None = None) -> None:
    """Copy value i's bytes (``lens[i]`` of them, 0 for values not written) to ``out[at[i]]``:
    8 bytes at a time (a few passes for short values, each one numpy gather and scatter over
    the values still going); values of many kilobytes by one scatter of every byte.
    ``src64`` is ``_words_at(data)`` where the caller has it."""
    total = int(lens.sum())
    if not total:
        return
    if int(lens.max()) <= _WORD_COPY_MAX:
        if src64 is None:
            src64 = _words_at(data)
        sel = np.flatnonzero(lens)
        src, dst, ln, lim = offsets[sel], at[sel], lens[sel], limit[sel]
        while len(src):
            out.put(dst, src64[src], np.minimum(ln, 8), lim)
            going = np.flatnonzero(ln > 8)
            if len(going) < len(src):
                src, dst, ln, lim = src[going], dst[going], ln[going], lim[going]
            src = src + 8
            dst = dst + 8
            ln = ln - 8
        return
    out = out.buf
    sel = np.flatnonzero(lens)
    ln, src, dst = lens[sel], offsets[sel], at[sel]
    first = np.zeros(len(sel), dtype=np.int64)
    np.cumsum(ln[:-1], out=first[1:])
    k = np.arange(total, dtype=np.int64)
    out[k + np.repeat(dst - first, ln)] = data[src[0]:src[0] + total] \
        if (src - first == src[0]).all() else data[k + np.repeat(src - first, ln)]


def _decimal_plan(s: _S, arr: pa.Array, present: np.ndarray, rows: np.ndarray, enc: _Enc,
                  where: str) -> _Plan:
    """decimal128 to big-endian two's complement: minimal bytes (as Java's BigInteger) for
    bytes, sign-extended to the size for fixed. Values with more digits than the schema's
    precision are error rows."""
    if not pa.types.is_decimal(arr.type):
        raise AvroSchemaError(f"{where}: a {arr.type} column cannot be written as an Avro decimal")
    if arr.type.scale != s.scale:
        arr = arr.cast(pa.decimal128(_MAX_PRECISION, s.scale))
    elif not pa.types.is_decimal128(arr.type):
        arr = arr.cast(pa.decimal128(min(arr.type.precision, _MAX_PRECISION), s.scale))
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[arr.offset * 16:(arr.offset + n) * 16]
    b = raw.reshape(n, 16).copy()
    lo = b[:, :8].copy().view("<u8").ravel()
    hi = b[:, 8:].copy().view("<i8").ravel()
    bound = 10 ** s.precision
    big = ((hi > bound >> 64) | ((hi == bound >> 64) & (lo >= np.uint64(bound & (2**64 - 1)))))
    neg = -bound
    small = ((hi < neg >> 64) | ((hi == neg >> 64) & (lo <= np.uint64(neg & (2**64 - 1)))))
    over = present & (big | small)
    if over.any():
        enc.fail(rows[over], f"{where}: a decimal with more than the schema's {s.precision} digits")
        present = present & ~over
    fill = np.where(hi < 0, 0xFF, 0).astype(np.uint8)
    if s.kind == "fixed":
        size = np.full(n, s.size, dtype=np.int64)
    else:
        size = np.full(n, 16, dtype=np.int64)
        for j in range(15, 0, -1):  # drop sign bytes the next byte's top bit repeats
            redundant = (size == j + 1) & (b[:, j] == fill) & (((b[:, j - 1] ^ fill) & 0x80) == 0)
            size[redundant] = j
    size = np.where(present, size, 0)
    idx = np.flatnonzero(present)

    def write_digits(out, at, limit):
        sz = size[idx]
        a = at[idx]
        for j in range(int(sz.max()) if len(sz) else 0):  # byte j from the big end
            sel = np.flatnonzero(sz > j)
            src = sz[sel] - 1 - j
            inside = src < 16
            vals = np.where(inside, b[idx[sel], np.minimum(src, 15)], fill[idx[sel]])
            out.buf[a[sel] + j] = vals

    if s.kind == "fixed":
        return _Plan(size, write_digits)
    return _uvarint_plan(size.astype(np.uint64) << _ONE, present, size, write_digits)


def _record_plan(s: _S, arr: pa.Array, present: np.ndarray, rows: np.ndarray, enc: _Enc,
                 path: str) -> _Plan:
    if not pa.types.is_struct(arr.type):
        raise AvroSchemaError(f"{path or 'the value'}: a {arr.type} column cannot be written as "
                              f"the Avro record {s.name!r} (a struct is needed)")
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    wanted = {f.name for f in s.fields}
    extra = [x for x in names if x not in wanted]
    missing = [f.name for f in s.fields if f.name not in names]
    if extra or missing:
        raise AvroSchemaError(
            f"{path or 'the value'}: the struct's fields do not match the Avro record "
            f"{s.name!r}: " + "; ".join(
                ([f"not in the schema: {', '.join(extra)}"] if extra else [])
                + ([f"missing from the column: {', '.join(missing)}"] if missing else [])))
    plans = _fused([_plan(f.type, arr.field(f.name), present, rows, enc,
                          f"{path}.{f.name}" if path else f.name) for f in s.fields])
    if len(plans) == 1:
        return plans[0]
    if not plans:
        return _word_plan(np.zeros(len(arr), dtype=np.uint64), np.zeros(len(arr), dtype=np.int64))
    sizes = np.zeros(len(arr), dtype=np.int64)
    for p in plans:
        sizes += p.sizes

    def write(out, at, limit):
        for p in plans:
            p.write(out, at, limit)
            at = at + p.sizes

    return _Plan(sizes, write)


def _list_parts(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(offsets from 0, int64; the child values of the slice) of a list or map column."""
    offsets = _numbers(arr.offsets, np.int64)
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return offsets - offsets[0], values


# Item kinds whose values are each written by one numpy store (a varint word, or exact bytes),
# all items in one assignment: the rule of :class:`_Out` then holds between an array's items.
_ONE_STORE = frozenset({"null", "boolean", "int", "long", "float", "double", "enum"})


def _list_plan(s: _S, arr: pa.Array, present: np.ndarray, rows: np.ndarray, enc: _Enc,
               path: str) -> _Plan:
    """One block per non-empty array or map (count, items), then the 0 that ends it: as
    Avro's Java and fastavro writers do."""
    is_map = s.kind == "map"
    if is_map and not pa.types.is_map(arr.type) or not is_map and not (
            pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        raise AvroSchemaError(f"{path or 'the value'}: a {arr.type} column cannot be written as "
                              f"an Avro {s.kind}")
    offsets, values = _list_parts(arr)
    lens = np.where(present, offsets[1:] - offsets[:-1], 0)
    item_present = np.repeat(present, offsets[1:] - offsets[:-1])
    item_rows = np.repeat(rows, offsets[1:] - offsets[:-1])
    where = f"{path}[]"
    if is_map:
        item_plans = _fused([
            _plan(_S("string"), values.field(0), item_present, item_rows, enc, f"{path} key"),
            _plan(s.items, values.field(1), item_present, item_rows, enc, where)])
    else:
        item_plans = [_plan(s.items, values, item_present, item_rows, enc, where)]
    item_sizes = item_plans[0].sizes if len(item_plans) == 1 else \
        item_plans[0].sizes + item_plans[1].sizes
    cum = np.zeros(len(item_sizes) + 1, dtype=np.int64)
    np.cumsum(item_sizes, out=cum[1:])
    content = cum[offsets[1:]] - cum[offsets[:-1]]
    count_varints = _Varints(lens.astype(np.uint64) << _ONE)  # zig-zag of counts >= 0
    count_sizes = count_varints.sizes
    sizes = np.where(present, np.where(lens > 0, count_sizes + content + 1, 1), 0)
    idx = np.flatnonzero(lens > 0)
    present_idx = np.flatnonzero(present)

    counts = offsets[1:] - offsets[:-1]
    one_store = len(item_plans) == 1 and (item_plans[0].word is not None
                                          or not is_map and s.items.kind in _ONE_STORE)

    def write(out, at, limit):
        count_varints.write(out, at, idx, limit)
        item_at = np.repeat(at + count_sizes - cum[offsets[:-1]], counts) + cum[:-1]
        if one_store:
            # Items written by one store each (in memory order, in one assignment): an item's
            # word may run over the next items, which are stored after it, up to the end of
            # what encloses the array. Most then take the plain store, not the merge.
            item_limit = np.repeat(limit, counts)
        else:
            item_limit = item_at + item_sizes  # an item's later fields are written after it
        for p in item_plans:
            p.write(out, item_at, item_limit)
            item_at = item_at + p.sizes
        out.buf[(at + sizes - 1)[present_idx]] = 0  # the block that ends it (or the empty one)

    return _Plan(sizes, write)


def _union_plan(s: _S, arr: pa.Array, present: np.ndarray, rows: np.ndarray, enc: _Enc,
                path: str) -> _Plan:
    """The branch of each value: null for nulls; else, for Spark's member0..N struct, the
    first member set; for a merged int/long or float/double column, the branch of the
    column's own width; else the one non-null branch."""
    n = len(arr)
    valid = _valid(arr)
    valid = np.ones(n, dtype=bool) if valid is None else valid
    null_index = next((i for i, b in enumerate(s.branches) if b.kind == "null"), -1)
    nn = [i for i, b in enumerate(s.branches) if b.kind != "null"]
    rep = _union_rep(s)
    branch = np.full(n, null_index, dtype=np.int64)
    parts: list[tuple[int, pa.Array, np.ndarray]] = []  # (branch, values, where it is taken)
    if rep == "struct":
        if not pa.types.is_struct(arr.type) or arr.type.num_fields != len(nn):
            raise AvroSchemaError(f"{path or 'the value'}: a union of {len(nn)} types is written "
                                  f"from a struct of {len(nn)} members (member0..), not {arr.type}")
        taken = ~valid
        for m, i in enumerate(nn):
            col = arr.field(m)
            v = _valid(col)
            here = valid & ~taken & (np.ones(n, dtype=bool) if v is None else v)
            branch[here] = i
            taken |= here
            parts.append((i, col, here))
    elif rep == "single":
        i = nn[0]
        if len(nn) == 2:
            wide = pa.types.is_integer(arr.type) and arr.type.bit_width == 64 or \
                pa.types.is_float64(arr.type)
            i = next(j for j in nn if s.branches[j].kind in (("long", "double") if wide
                                                             else ("int", "float")))
        branch[valid] = i
        parts.append((i, arr, valid.copy()))
    if null_index < 0:
        missing = present & (branch < 0)
        if missing.any():
            enc.fail(rows[missing], f"{path or 'the value'}: null, and the union has no null")
        branch = np.maximum(branch, 0)
        present = present & ~missing
    plans = [(_plan(s.branches[i], col, present & here, rows, enc, path)) for i, col, here in parts]
    tags = _Varints(zigzag(branch))
    tag_sizes = tags.sizes
    sizes = np.where(present, tag_sizes, 0)
    for p in plans:
        sizes += p.sizes
    if all(p.word is not None for p in plans) and int(sizes.max(initial=0)) <= 8:
        word = np.where(present, tags.words, np.uint64(0))
        shift = tag_sizes.astype(np.uint64) << np.uint64(3)
        for p in plans:  # a value is in one branch at most: the others' words are 0 there
            word |= p.word << shift
        return _word_plan(word, sizes)
    idx = None if present.all() else np.flatnonzero(present)

    def write(out, at, limit):
        tags.write(out, at, idx, limit)
        for p in plans:
            p.write(out, at + tag_sizes, limit)

    return _Plan(sizes, write)


# --------------------------------------------------------------------------- codec

class AvroCodec:
    """Avro for one (writer schema, reader schema) pair: :class:`Codec`'s shape."""

    # A write task joins Spark's small Arrow batches up to this many bytes before encoding
    # (``batches.coalesced``): encode works in slices of about this size anyway.
    join_bytes = _CHUNK_BYTES

    def __init__(self, writer_schema: str, reader_schema: str | None = None,
                 writer_references: Sequence[str] = (), reader_references: Sequence[str] = ()):
        self.writer = _parse(writer_schema, writer_references)
        self.reader = self.writer if reader_schema is None else _parse(reader_schema,
                                                                       reader_references)
        self.arrow_type: pa.DataType = _arrow(self.reader)[0]
        _arrow(self.writer)  # a recursive writer schema fails here, not in decode
        self._decoder = _resolve(self.writer, self.reader, "")

    def decode(self, payloads: pa.Array) -> DecodeResult:
        """One value per payload (the datum after the wire header); null payloads give null
        values; payloads that do not decode give null values and an entry in ``errors``.

        A column is decoded in slices of about ``_CHUNK_BYTES``: each field's pass over the
        payloads then stays in the CPU's cache."""
        if isinstance(payloads, pa.ChunkedArray):
            payloads = pa.concat_arrays(payloads.chunks) if payloads.num_chunks != 1 \
                else payloads.chunk(0)
        if not pa.types.is_binary(payloads.type):
            payloads = payloads.cast(pa.binary())
        n = len(payloads)
        if n > _CHUNK_ROWS_MIN and _offsets_and_data(payloads)[1].nbytes > _CHUNK_BYTES:
            offsets = _offsets_and_data(payloads)[0]
            cuts = np.searchsorted(offsets, np.arange(0, int(offsets[-1]), _CHUNK_BYTES))
            cuts = [0] + [int(c) for c in cuts[1:] if c > 0] + [n]
            bounds = [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
            parts = [self._decode(payloads.slice(a, b - a)) for a, b in bounds]
            errors = {a + i: m for (a, _), part in zip(bounds, parts)
                      for i, m in part.errors.items()}
            return DecodeResult(pa.concat_arrays([p.values for p in parts]), errors)
        return self._decode(payloads)

    def _decode(self, payloads: pa.Array) -> DecodeResult:
        n = len(payloads)
        offsets, data = _offsets_and_data(payloads) if n else (np.zeros(1, np.int64),
                                                             np.zeros(0, np.uint8))
        total = len(data)
        buf = np.zeros(total + _PAD, dtype=np.uint8)
        buf[:total] = data
        valid = _valid(payloads)
        rows = np.arange(n, dtype=np.int64) if valid is None else np.flatnonzero(valid)
        ctx = _Ctx(buf, total, offsets[1:])
        arr, pos = self._decoder.decode(ctx, offsets[:-1][rows], rows)
        ends = ctx.ends[rows]
        if len(pos) and (pos != ends).any():
            short = pos > ends
            ctx.fail(rows[short], "the datum runs past the end of its payload (truncated, or "
                                  "written with another schema)")
            ctx.fail(rows[pos < ends], "bytes are left after the datum (written with another "
                                       "schema, or corrupt)")
        errors: dict[int, str] = {}
        for bad_rows, message in ctx.errors:
            for r in bad_rows.tolist():
                errors.setdefault(r, message)
        if errors or valid is not None:
            keep = np.full(n, -1, dtype=np.int64)
            keep[rows] = np.arange(len(rows))
            if errors:
                keep[np.fromiter(errors, dtype=np.int64, count=len(errors))] = -1
            arr = arr.take(_indices(keep, keep >= 0))
        return DecodeResult(arr, errors)

    def encode(self, values: pa.Array) -> EncodeResult:
        """One payload per value (null values give null payloads); values that do not fit the
        writer schema give null payloads and an entry in ``errors``.

        A column is encoded in slices of about ``_CHUNK_BYTES`` of output (the first slice's
        row size sets the rest's row count), so that each field's pass stays in cache. Every
        slice is written in place into one buffer, which is the payloads' data buffer."""
        if isinstance(values, pa.ChunkedArray):
            values = pa.concat_arrays(values.chunks) if values.num_chunks != 1 \
                else values.chunk(0)
        n = len(values)
        valid = _valid(values)
        present_all = np.ones(n, dtype=bool) if valid is None else valid
        offsets = np.zeros(n + 1, dtype=np.int64)
        buf = np.zeros(16, dtype=np.uint8)
        enc = _Enc()
        # The first slice's rows from the column's own bytes per row (near the encoded
        # size): a batch that fits one slice is encoded in one pass of each field.
        start, step = 0, min(_FIRST_ROWS_MAX, max(_CHUNK_ROWS_MIN,
                                                  _CHUNK_BYTES * n // max(1, values.nbytes)))
        while start < n:
            stop = min(n, start + step)
            plan = _plan(self.writer, values.slice(start, stop - start),
                         present_all[start:stop], np.arange(start, stop), enc, "")
            ends = offsets[start + 1:stop + 1]
            np.cumsum(plan.sizes, out=ends)
            ends += offsets[start]
            if ends[-1] >= 2**31:
                raise AvroSchemaError(f"{n} values encode to more than {int(ends[-1])} bytes, "
                                      "more than one Arrow binary column holds: encode fewer "
                                      "at a time")
            if int(ends[-1]) + 16 > len(buf):  # room for the rest, as this far, and a margin
                grown = np.zeros(int(ends[-1] * 1.25 * n / stop) + 16, dtype=np.uint8)
                grown[:offsets[start]] = buf[:offsets[start]]
                buf = grown
            # A row's own end is its limit: the next row's bytes are written already.
            plan.write(_Out(buf), offsets[start:stop], ends)
            if start == 0:
                step = max(_CHUNK_ROWS_MIN, _CHUNK_BYTES // max(1, int(ends[-1]) // stop))
            start = stop
        errors: dict[int, str] = {}
        for bad_rows, message in enc.errors:
            for r in bad_rows.tolist():
                errors.setdefault(r, message)
        total = int(offsets[-1])
        data = pa.py_buffer(buf[:total] if len(buf) < 2 * total + 64 else buf[:total].copy())
        validity = None
        if valid is not None or errors:
            ok = present_all.copy()
            ok[np.fromiter(errors, dtype=np.int64, count=len(errors))] = False
            validity = pa.py_buffer(np.packbits(ok, bitorder="little"))
        payloads = pa.Array.from_buffers(
            pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)), data],
            null_count=-1 if validity is not None else 0)
        if errors:  # the rows that did not fit hold no bytes
            lens = np.diff(offsets)
            lens[np.fromiter(errors, dtype=np.int64, count=len(errors))] = 0
            keep = np.empty(2 * n + 1, dtype=np.int32)
            keep[0:2 * n:2] = offsets[:-1]
            keep[1:2 * n:2] = offsets[:-1] + lens
            keep[2 * n] = total
            both = pa.Array.from_buffers(pa.binary(), 2 * n, [None, pa.py_buffer(keep), data])
            payloads = pa.Array.from_buffers(pa.binary(), n, [validity,
                                             *both.take(_evens(n)).buffers()[1:]])
        return EncodeResult(payloads, errors)


def codec(writer_schema: str, reader_schema: str | None = None, *,
          writer_references: Sequence[str] = (),
          reader_references: Sequence[str] = ()) -> AvroCodec:
    """The codec of a (writer, reader) schema pair, as Avro JSON text, each with the texts of
    the schemas it references (named types defined in other subjects); compiled once (a
    registry client hands out the same text for the same schema id)."""
    return _codec(writer_schema, reader_schema, tuple(writer_references),
                  tuple(reader_references))


@lru_cache(maxsize=256)
def _codec(writer_schema: str, reader_schema: str | None, writer_references: tuple[str, ...],
           reader_references: tuple[str, ...]) -> AvroCodec:
    return AvroCodec(writer_schema, reader_schema, writer_references, reader_references)


# --------------------------------------------------------------------------- Arrow -> Avro

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _min_bytes(precision: int) -> int:
    size = 1
    while 2 ** (8 * size - 1) < 10 ** precision:
        size += 1
    return size


def _avro_of(t: pa.DataType, nullable: bool, name: str, ns: str) -> Any:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_boolean(t):
        s: Any = "boolean"
    elif pa.types.is_integer(t) and (t.bit_width < 32 or t.bit_width == 32 and
                                     pa.types.is_signed_integer(t)):
        s = "int"
    elif pa.types.is_integer(t) and (t.bit_width < 64 or pa.types.is_signed_integer(t)):
        s = "long"
    elif pa.types.is_float32(t) or pa.types.is_float16(t):
        s = "float"
    elif pa.types.is_float64(t):
        s = "double"
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        s = "string"
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t) \
            or pa.types.is_fixed_size_binary(t):
        s = "bytes"
    elif pa.types.is_date32(t):
        s = {"type": "int", "logicalType": "date"}
    elif pa.types.is_timestamp(t):
        s = {"type": "long",
             "logicalType": "timestamp-micros" if t.tz else "local-timestamp-micros"}
    elif pa.types.is_decimal(t):
        if t.precision > _MAX_PRECISION:
            raise AvroSchemaError(f"{name}: decimal precision {t.precision} is beyond Spark's "
                                  f"{_MAX_PRECISION}")
        s = {"type": "fixed", "name": "fixed", "namespace": f"{ns}.{name}" if ns else name,
             "size": _min_bytes(t.precision), "logicalType": "decimal",
             "precision": t.precision, "scale": t.scale}
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        f = t.value_field
        s = {"type": "array", "items": _avro_of(f.type, f.nullable, name, ns)}
    elif pa.types.is_map(t):
        if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
            raise AvroSchemaError(f"{name}: a map with {t.key_type} keys; Avro maps have string "
                                  "keys")
        f = t.item_field
        s = {"type": "map", "values": _avro_of(f.type, f.nullable, name, ns)}
    elif pa.types.is_struct(t):
        child_ns = f"{ns}.{name}" if ns else name
        fields = []
        for f in t:
            if not _NAME.fullmatch(f.name):
                raise AvroSchemaError(
                    f"the field name {f.name!r} (of the struct written as record {name!r}) is "
                    "not a valid Avro name (letters, digits and _, not starting with a digit): "
                    "rename the column, or register a schema")
            entry: dict[str, Any] = {"name": f.name,
                                     "type": _avro_of(f.type, f.nullable, f.name, child_ns)}
            if f.nullable and not pa.types.is_null(f.type):
                entry["default"] = None
            fields.append(entry)
        s = {"type": "record", "name": name, "fields": fields}
        if ns:
            s["namespace"] = ns
    else:
        raise AvroSchemaError(f"{name}: the Arrow type {t} has no Avro type txkafka writes")
    return ["null", s] if nullable else s


def schema_from_arrow(t: pa.DataType, record_name: str = "topLevelRecord",
                      namespace: str = "") -> str:
    """The Avro schema (JSON text) for writing a column of Arrow type ``t``, as Spark's to_avro
    derives it (records named after their field, namespaced by their parents), but with each
    nullable type as ``["null", T]`` and record fields defaulting to null: under BACKWARD
    compatibility a new nullable column is then a field added with a default, which the
    registry accepts (Spark's ``[T, "null"]`` without a default would be refused)."""
    return json.dumps(_avro_of(t, False, record_name, namespace), separators=(",", ":"))
