"""Protobuf payloads (Confluent's wire format) to and from Arrow, a column at a time.

Payloads reach the codec without the 5-byte wire header: a list of message indexes (zig-zag
varints: a count, then one index per nesting level; the single byte 0 stands for the first
message of the file), then the serialized message. The codec reads and writes the indexes of its
own message; the message bytes go through ``ptars`` (Rust, prost-reflect), which decodes a whole
Arrow binary column into Arrow columns and encodes them back, with no Python per row.

Schemas come as the registry keeps them: ``.proto`` text (parsed by protoc, from the optional
``grpcio-tools``, in a child process so its messages can be reported) or the base64
``FileDescriptorProto`` that the registry's ``format=serialized`` answers with (no protoc
needed). Imported files come by import name; Google's well-known types come from the protobuf
package when the registry does not send them.

Types follow Spark's ``from_protobuf``: messages are structs, repeated fields lists, map fields
maps, enums their names as strings, oneof members nullable fields of the struct; ``Timestamp`` is
``timestamp[us, UTC]``, ``Duration`` ``duration[us]`` (Spark's day-time interval), wrappers
nullable scalars; unsigned 32/64-bit integers keep their bits in int32/int64 as Spark's defaults
do. Every field is nullable in the Arrow type, as in Spark's; a field absent from a payload reads
as its default (protobuf's own rule). Unknown fields are skipped, so a payload written with a
schema that added or removed fields decodes with the reader's. Writing refuses a row with a null
where the field has no presence (it would read back as 0 or empty, not null).

``schema_from_arrow`` derives a proto3 schema from a column's Arrow type (auto-registration).
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import re
import subprocess
import sys
import tempfile
from typing import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import SchemaFormatError

from . import DecodeResult, EncodeResult, columns

_INSTALL = "pip install 'txkafka[protobuf]'"
# Google's well-known types: the protobuf package carries their descriptors.
_WELL_KNOWN = ("any", "api", "descriptor", "duration", "empty", "field_mask", "source_context",
               "struct", "timestamp", "type", "wrappers")


def _protobuf():
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool
    except ImportError as e:  # pragma: no cover - the extra is installed in the test runs
        raise SchemaFormatError(
            f"Protobuf payloads need the protobuf package: {_INSTALL}") from e
    return descriptor_pb2, descriptor_pool


def _well_known(name: str):
    """The FileDescriptorProto of a ``google/protobuf/*.proto`` import, or None."""
    if not name.startswith("google/protobuf/") or not name.endswith(".proto"):
        return None
    stem = name[len("google/protobuf/"):-len(".proto")]
    if stem not in _WELL_KNOWN:
        return None
    import importlib
    descriptor_pb2, _ = _protobuf()
    module = importlib.import_module(f"google.protobuf.{stem}_pb2")
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def _serialized(text: str):
    """The FileDescriptorProto in a registry's base64 ``format=serialized`` answer, or None when
    ``text`` is ``.proto`` source (which always holds characters base64 does not)."""
    compact = "".join(text.split())
    if not compact:
        return None
    try:
        raw = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return None
    descriptor_pb2, _ = _protobuf()
    proto = descriptor_pb2.FileDescriptorProto()
    try:
        proto.ParseFromString(raw)
    except Exception as e:
        raise SchemaFormatError(
            "the Protobuf schema is base64 but not a serialized FileDescriptorProto (the "
            f"registry's format=serialized answer): {e}") from e
    return proto


@functools.lru_cache(maxsize=32)
def _protoc(sources: tuple[tuple[str, str], ...], main: str) -> bytes:
    """The serialized FileDescriptorSet of ``main`` and everything it imports, parsed by protoc
    (kept: a worker makes a codec per schema and task, protoc is a process start)."""
    try:
        import grpc_tools
    except ImportError as e:
        raise SchemaFormatError(
            "this Protobuf schema is .proto text, which needs protoc: install it with "
            f"{_INSTALL} (grpcio-tools), or have the registry client ask for format=serialized"
        ) from e
    bundled = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="txkafka-proto-") as tmp:
        for name, text in sources:
            path = os.path.normpath(os.path.join(tmp, name))
            if os.path.isabs(name) or not path.startswith(tmp + os.sep):
                raise SchemaFormatError(
                    f"the Protobuf reference name {name!r} is not a relative import path")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        out = os.path.join(tmp, "descriptor_set.pb")
        # A child process: protoc reports on its stderr, which in-process would go to the
        # worker's own stderr unseen.
        done = subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}", f"-I{bundled}",
             "--include_imports", f"--descriptor_set_out={out}", main],
            cwd=tmp, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().replace(tmp + os.sep, "")
            raise SchemaFormatError(f"protoc could not parse the Protobuf schema: {detail}")
        with open(out, "rb") as f:
            return f.read()


def file_descriptors(schema: str, references: Mapping[str, str] | None = None) -> list:
    """The FileDescriptorProtos of a registry schema (``.proto`` text or base64 serialized) and
    of its references (import name -> text or base64), the schema's own file last."""
    references = dict(references or {})
    main = _serialized(schema)
    refs = {name: _serialized(text) for name, text in references.items()}
    if main is not None and all(p is not None for p in refs.values()):
        files = list(refs.values()) + [main]
    else:
        # Some text: protoc parses it all (a serialized reference is handed back as text).
        name = "txkafka_schema.proto"
        while name in references:
            name = "_" + name
        sources = {n: (t if refs[n] is None else _proto_source(refs[n]))
                   for n, t in references.items()}
        sources[name] = schema if main is None else _proto_source(main)
        descriptor_pb2, _ = _protobuf()
        files = list(descriptor_pb2.FileDescriptorSet.FromString(
            _protoc(tuple(sorted(sources.items())), name)).file)
    # Imports nobody sent: the well-known types, from the protobuf package.
    known = {f.name for f in files}
    for f in list(files):
        for dep in f.dependency:
            if dep not in known:
                wk = _well_known(dep)
                if wk is None:
                    raise SchemaFormatError(
                        f"the Protobuf schema {f.name!r} imports {dep!r}, which is not among its "
                        f"references ({sorted(references) or 'none'}); register it as a "
                        "reference of the schema")
                files.insert(0, wk)
                known.add(dep)
    return files


def _proto_source(proto) -> str:
    raise SchemaFormatError(
        f"the Protobuf schema mixes .proto text and serialized descriptors ({proto.name!r}); ask "
        "the registry for one form (format=serialized for all)")


def codec(schema: str, references: Mapping[str, str] | None = None,
          message: str | None = None) -> "ProtobufCodec":
    """A codec for one registry schema: ``.proto`` text or base64 ``FileDescriptorProto``,
    references by import name, ``message`` fully qualified (default: the file's first message,
    as Confluent's serializer picks)."""
    return codec_from_descriptor(file_descriptors(schema, references), message)


def codec_from_descriptor(files: Sequence | bytes, message: str | None = None
                          ) -> "ProtobufCodec":
    """A codec from FileDescriptorProtos (objects or serialized bytes; the schema's own file
    last, its imports before it) or a serialized ``FileDescriptorSet``."""
    descriptor_pb2, _ = _protobuf()
    if isinstance(files, (bytes, bytearray, memoryview)):
        files = list(descriptor_pb2.FileDescriptorSet.FromString(bytes(files)).file)
    protos = []
    for f in files:
        if isinstance(f, (bytes, bytearray, memoryview)):
            f = descriptor_pb2.FileDescriptorProto.FromString(bytes(f))
        protos.append(f)
    if not protos:
        raise SchemaFormatError("no Protobuf file descriptor was given")
    return ProtobufCodec(protos, message)


def _ordered(protos: list) -> list:
    """Files with every import before the file that imports it (the pool needs them so)."""
    by_name = {p.name: p for p in protos}
    done: dict[str, object] = {}

    def visit(p, path: tuple[str, ...]) -> None:
        if p.name in done:
            return
        if p.name in path:
            raise SchemaFormatError(f"Protobuf imports form a cycle: {' -> '.join(path)}")
        for dep in p.dependency:
            if dep in by_name:
                visit(by_name[dep], path + (p.name,))
            elif _well_known(dep) is not None:
                wk = _well_known(dep)
                by_name[dep] = wk
                visit(wk, path + (p.name,))
            else:
                raise SchemaFormatError(
                    f"the Protobuf file {p.name!r} imports {dep!r}, which was not given")
        done[p.name] = p

    for p in protos:
        visit(p, ())
    return list(done.values())


def _message_indexes(file_proto, full_name: str) -> list[int] | None:
    """Confluent's message indexes of ``full_name`` in ``file_proto``: its index among the
    file's messages, then among each enclosing message's nested messages."""
    prefix = f"{file_proto.package}." if file_proto.package else ""

    def walk(messages, scope: str, path: list[int]) -> list[int] | None:
        for i, m in enumerate(messages):
            name = f"{scope}{m.name}"
            if name == full_name:
                return path + [i]
            found = walk(m.nested_type, name + ".", path + [i])
            if found is not None:
                return found
        return None

    return walk(file_proto.message_type, prefix, [])


def _zigzag_varint(v: int) -> bytes:
    v = (v << 1) ^ (v >> 63)
    out = bytearray()
    while v & ~0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode_message_indexes(indexes: Sequence[int], shortest: bool = True) -> bytes:
    """The wire bytes of a message-index list: the single byte 0 for ``[0]`` (``shortest``),
    as Confluent's serializers write it."""
    if shortest and list(indexes) == [0]:
        return b"\x00"
    return _zigzag_varint(len(indexes)) + b"".join(_zigzag_varint(i) for i in indexes)


def read_message_indexes(payload: bytes) -> tuple[list[int], int]:
    """(message indexes, bytes they take) at the start of one payload; ValueError if cut short
    or absurd (Confluent's deserializer refuses more than 100,000)."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            if pos >= len(payload):
                raise ValueError("the payload ends inside its message indexes")
            b = payload[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (value >> 1) ^ -(value & 1)
            if shift > 63:
                raise ValueError("a message index is longer than 10 bytes")

    count = varint()
    if count < 0 or count > 100_000:
        raise ValueError(f"the message-index count is {count}")
    if count == 0:
        return [0], pos
    return [varint() for _ in range(count)], pos


def _nullable(t: pa.DataType, signed: bool = True) -> pa.DataType:
    """``t`` with every nested field nullable (Spark's schemas are) and, if ``signed``,
    unsigned integers as the signed type of the same width (Spark's IntegerType/LongType hold
    their bits)."""
    if signed and t == pa.uint32():
        return pa.int32()
    if signed and t == pa.uint64():
        return pa.int64()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _nullable(f.type, signed), True) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_nullable(t.key_type, signed),
                       pa.field("value", _nullable(t.item_type, signed), True))
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _nullable(t.value_type, signed), True))
    return t


def _binary(payloads: pa.Array) -> pa.Array:
    if isinstance(payloads, pa.ChunkedArray):
        payloads = payloads.combine_chunks()
    if pa.types.is_binary(payloads.type):
        return payloads
    return payloads.cast(pa.binary())


def _prefixed(values: pa.Array, prefix: bytes) -> pa.Array:
    """``prefix`` + each value of a null-free binary array."""
    return pc.binary_join_element_wise(pa.scalar(prefix, pa.binary()), values, b"")


class ProtobufCodec:
    """One message type of one Protobuf schema: decode and encode whole Arrow columns."""

    def __init__(self, protos: list, message: str | None = None) -> None:
        _, descriptor_pool = _protobuf()
        try:
            import ptars
        except ImportError as e:
            raise SchemaFormatError(
                f"Protobuf payloads are decoded by ptars: {_INSTALL}") from e
        files = _ordered(protos)
        own = protos[-1]
        pool = descriptor_pool.DescriptorPool()  # never the default pool: other code's types
        for f in files:
            try:
                pool.Add(f)
            except Exception as e:
                raise SchemaFormatError(
                    f"the Protobuf file {f.name!r} is not a valid descriptor: {e}") from e
        if message is None:
            if not own.message_type:
                raise SchemaFormatError(
                    f"the Protobuf schema {own.name!r} defines no message")
            message = f"{own.package}.{own.message_type[0].name}" if own.package \
                else own.message_type[0].name
        try:
            self.descriptor = pool.FindMessageTypeByName(message)
        except KeyError as e:
            raise SchemaFormatError(
                f"the Protobuf schema {own.name!r} has no message {message!r}; its messages: "
                f"{', '.join(_names(own))}") from e
        if self.descriptor.file.name != own.name:
            raise SchemaFormatError(
                f"the Protobuf message {message!r} is defined in {self.descriptor.file.name!r}, "
                f"not in the schema's own file: message indexes can name only the latter's "
                f"({', '.join(_names(own))}); use the referenced file's own schema")
        indexes = _message_indexes(own, message)
        if indexes is None:  # pragma: no cover - found by the pool in this file
            raise SchemaFormatError(f"no message indexes for {message!r}")
        self.message = message
        self.message_indexes = indexes
        self._serialized = tuple(p.SerializeToString() for p in protos)
        self._prefix = encode_message_indexes(indexes)
        # Readers accept the long form of [0] too (count 1, index 0).
        self._prefixes = tuple(dict.fromkeys([self._prefix,
                                              encode_message_indexes(indexes, shortest=False)]))
        _check_recursion(self.descriptor)
        config = ptars.PtarsConfig(timestamp_unit="us", duration_unit="us", enum_repr="string",
                                   list_value_name="element")
        self._handler = ptars.HandlerPool([self.descriptor.file], config=config) \
            .get_for_message(self.descriptor)
        self._check_decode = _checked(self.descriptor, enums=False)
        self._check_encode = _checked(self.descriptor, enums=True)
        self._native_schema = self._handler.schema()
        # What ptars writes from: its own types (unsigned kept), with nulls allowed (a null
        # field is written as absent).
        self._native_type = _nullable(pa.struct(list(self._native_schema)), signed=False)
        self.arrow_type: pa.DataType = _nullable(self._native_type)

    def __reduce__(self):
        # Pickled as its descriptors (ptars' native handler is not picklable): Spark ships a
        # codec made on the driver to its executors this way.
        return codec_from_descriptor, (list(self._serialized), self.message)

    # ------------------------------------------------------------------ decode

    def decode(self, payloads: pa.Array) -> DecodeResult:
        """One value per payload (bytes after the 5-byte header): null for a null payload and
        for each row in ``errors``."""
        payloads = _binary(payloads)
        n = len(payloads)
        errors: dict[int, str] = {}
        valid = columns.bools(payloads.is_valid())
        taken = np.zeros(n, dtype=bool)
        groups: list[tuple[np.ndarray, pa.Array]] = []
        for prefix in self._prefixes:
            ok = ~taken & columns.bools(pc.starts_with(payloads, pattern=prefix).fill_null(False))
            if ok.any():
                taken |= ok
                groups.append((np.flatnonzero(ok), pc.binary_slice(
                    payloads.filter(columns.mask(ok)), len(prefix), (1 << 31) - 1)))
        odd_rows, odd_bodies = [], []
        for i in np.flatnonzero(valid & ~taken):
            # Neither form of this message's indexes: another message, or corrupt. Rare, so
            # read row by row.
            payload = payloads[int(i)].as_py()
            try:
                indexes, used = read_message_indexes(payload)
            except ValueError as e:
                errors[int(i)] = f"the Protobuf message indexes are corrupt: {e}"
                continue
            if indexes != self.message_indexes:
                errors[int(i)] = (
                    f"the payload's message indexes {indexes} name another message than "
                    f"{self.message!r} ({self.message_indexes}) of the schema")
                continue
            odd_rows.append(int(i))
            odd_bodies.append(payload[used:])
        if odd_rows:
            groups.append((np.array(odd_rows, dtype=np.int64), pa.array(odd_bodies, pa.binary())))
        if not groups:
            return DecodeResult(pa.nulls(n, self.arrow_type), dict(sorted(errors.items())))
        rows = np.concatenate([g[0] for g in groups])
        bodies = pa.concat_arrays([g[1] for g in groups]) if len(groups) > 1 else groups[0][1]
        decoded, bad = columns.by_halves(
            bodies, lambda b: self._cast_in(self._handler.array_to_record_batch(b)),
            lambda e: f"the Protobuf message is corrupt: {e}", self.arrow_type)
        if self._check_decode:
            for j, why in _misfits(decoded, self.descriptor, np.arange(len(decoded)), "",
                                   False).items():
                bad.setdefault(j, why)
        errors.update({int(rows[j]): why for j, why in bad.items()})
        decoded, rows = columns.drop_rows(decoded, rows, bad)
        if len(rows) > 1 and (np.diff(rows) < 0).any():  # groups of each index form
            order = np.argsort(rows, kind="stable")
            decoded, rows = decoded.take(columns.ints(order)), rows[order]
        return DecodeResult(columns.spread(decoded, rows, n), dict(sorted(errors.items())))

    def _cast_in(self, batch: pa.RecordBatch) -> pa.Array:
        arr = pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema)) \
            if batch.num_columns else pa.array([{}] * batch.num_rows, pa.struct([]))
        return arr.cast(self.arrow_type, safe=False)

    # ------------------------------------------------------------------ encode

    def encode(self, values: pa.Array) -> EncodeResult:
        """One payload per value (message indexes + message): null for a null value and for
        each row in ``errors``."""
        n = len(values)
        rows, present = columns.null_free(values)
        try:
            native = present.cast(self._native_type, safe=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise SchemaFormatError(
                f"values of type {values.type} cannot be written as Protobuf message "
                f"{self.message!r} (Arrow type {self.arrow_type}): {e}") from e
        bad = _misfits(native, self.descriptor, np.arange(len(native)), "", True) \
            if self._check_encode else {}
        encoded, unfit = columns.by_halves(
            native, lambda v: self._handler.record_batch_to_array(
                pa.RecordBatch.from_struct_array(v)),
            lambda e: f"the value does not fit Protobuf message {self.message!r}: {e}",
            pa.binary())
        for j, why in unfit.items():
            bad.setdefault(j, why)
        errors = {int(rows[j]): why for j, why in bad.items()}
        encoded, rows = columns.drop_rows(encoded, rows, bad)
        payloads = _prefixed(encoded, self._prefix) if len(encoded) else encoded
        return EncodeResult(columns.spread(payloads, rows, n), dict(sorted(errors.items())))


def _names(file_proto) -> Iterable[str]:
    prefix = f"{file_proto.package}." if file_proto.package else ""
    return [prefix + m.name for m in file_proto.message_type]


def _check_recursion(descriptor, path: tuple[str, ...] = ()) -> None:
    """Refuse recursive messages: Arrow's types are finite (Spark refuses them by default)."""
    if descriptor.full_name in path:
        raise SchemaFormatError(
            f"the Protobuf message {path[0]!r} is recursive "
            f"({' -> '.join(path + (descriptor.full_name,))}); an Arrow (Spark) type cannot "
            "hold it")
    for field in descriptor.fields:
        if field.message_type is not None and not field.message_type.full_name.startswith(
                "google.protobuf."):
            _check_recursion(field.message_type, path + (descriptor.full_name,))


def _misfits(arr: pa.Array, descriptor, rows: np.ndarray, path: str, enums: bool
             ) -> dict[int, str]:
    """Rows (``rows`` maps ``arr``'s elements to them) that lack a proto2 ``required`` field
    (ptars reads and writes such a message without a word), or, with ``enums``, name a value
    that their enum lacks (ptars would write it as the enum's first value)."""
    bad: dict[int, str] = {}
    parent = columns.bools(arr.is_valid()) if len(arr) else np.zeros(0, dtype=bool)
    for field in descriptor.fields:
        enum, msg = field.enum_type, field.message_type
        name = f"{path}{field.name}"
        col = pc.struct_field(arr, field.name)
        if _required(field):
            for j in np.flatnonzero(parent & ~columns.bools(col.is_valid())):
                bad.setdefault(int(rows[j]), f"required field {name!r} is missing")
        elif enums:
            _nulls_without_presence(field, col, parent, rows, name, bad)
        if (enum is None or not enums) and (msg is None
                                            or msg.full_name.startswith("google.protobuf.")
                                            or _scalar_map(msg)):
            continue
        where = rows
        if _repeated(field):
            if pa.types.is_map(col.type):  # its entries, as messages of the entry type
                col = _entries(col)
            where = rows[np.asarray(pc.list_parent_indices(col), dtype=np.int64)]
            col = pc.list_flatten(col)
        if enum is not None:
            names = pa.array([v.name for v in enum.values], pa.string())
            misfit = pc.and_(pc.invert(pc.is_in(col, value_set=names)), pc.is_valid(col))
            for j in np.flatnonzero(columns.bools(misfit)):
                bad.setdefault(int(where[j]),
                               f"field {name!r}: {col[int(j)].as_py()!r} is not a value of enum "
                               f"{enum.full_name} ({', '.join(v.name for v in enum.values)})")
        elif len(col):
            for row, why in _misfits(col, msg, where, name + ".", enums).items():
                bad.setdefault(row, why)
    return bad


def _nulls_without_presence(field, col: pa.Array, parent: np.ndarray, rows: np.ndarray,
                            name: str, bad: dict[int, str]) -> None:
    """Rows where a null sits in a place Protobuf cannot mark as absent: ptars would write a
    null array or map as empty, a null element as 0 or an empty message, a null proto3 field
    without ``optional`` as its default; read back, the null would be gone."""
    repeated = _repeated(field)
    if (repeated or not field.has_presence) and col.null_count:
        nulls = parent & ~columns.bools(col.is_valid())
        what = "an empty list" if repeated else f"its default {field.default_value!r}"
        for j in np.flatnonzero(nulls):
            bad.setdefault(int(rows[j]), (
                f"field {name!r} is null, which Protobuf would write as {what} (the field has "
                "no presence: repeated, a map, or proto3 without 'optional'); fill it with "
                "coalesce() or filter such rows before the write"))
    if not repeated or not len(col):
        return
    is_map = pa.types.is_map(col.type)
    if is_map:
        col = _entries(col)
    flat = pc.list_flatten(col)
    items = pc.struct_field(flat, "value") if is_map else flat
    if items.null_count:
        null_items = ~columns.bools(items.is_valid())
        owner = rows[np.asarray(pc.list_parent_indices(col), dtype=np.int64)]
        what = "a map value" if is_map else "an element"
        for j in np.flatnonzero(null_items):
            bad.setdefault(int(owner[j]), (
                f"field {name!r} holds a null as {what}, which Protobuf cannot hold (it would "
                "be written as 0 or empty); drop the nulls (array_compact()) or fill them "
                "before the write"))


def _scalar_map(msg) -> bool:
    """Whether ``msg`` is a map's entry with scalar values: nothing in it to look into (its
    null values are found with the map field)."""
    if not msg.GetOptions().map_entry:
        return False
    value = msg.fields_by_name["value"]
    return value.enum_type is None and value.message_type is None


def _entries(col: pa.Array) -> pa.Array:
    """A map column as a list of its (key, value) entries: the list kernels take no maps."""
    return col.cast(pa.list_(pa.field("entries", pa.struct(
        [col.type.key_field, col.type.item_field]), False)))


def _checked(descriptor, enums: bool, seen: frozenset[str] = frozenset()) -> bool:
    """Whether ``_misfits`` has anything to look for under ``descriptor`` (when encoding:
    always, for nulls in places without presence)."""
    if enums and descriptor.fields:
        return True
    for field in descriptor.fields:
        if _required(field) or (enums and field.enum_type is not None):
            return True
        msg = field.message_type
        if msg is not None and msg.full_name not in seen \
                and not msg.full_name.startswith("google.protobuf.") \
                and _checked(msg, enums, seen | {msg.full_name}):
            return True
    return False


def _required(field) -> bool:
    flag = getattr(field, "is_required", None)
    return bool(flag) if flag is not None else field.label == field.LABEL_REQUIRED


def _repeated(field) -> bool:
    """Whether a field is repeated (protobuf 7 dropped ``label`` for ``is_repeated``)."""
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == field.LABEL_REPEATED


# --------------------------------------------------------------------------- derived schemas

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TIMESTAMP = "google/protobuf/timestamp.proto"
_DURATION = "google/protobuf/duration.proto"
_PROTO_SCALARS = (
    (pa.types.is_int8, "int32"), (pa.types.is_int16, "int32"), (pa.types.is_int32, "int32"),
    (pa.types.is_int64, "int64"), (pa.types.is_float32, "float"),
    (pa.types.is_float64, "double"), (pa.types.is_boolean, "bool"),
    (pa.types.is_string, "string"), (pa.types.is_large_string, "string"),
    (pa.types.is_binary, "bytes"), (pa.types.is_large_binary, "bytes"))
_MAP_KEYS = {pa.int8(): "int32", pa.int16(): "int32", pa.int32(): "int32",
             pa.int64(): "int64", pa.bool_(): "bool", pa.string(): "string",
             pa.large_string(): "string"}


def schema_from_arrow(t: pa.DataType, record_name: str = "topLevelRecord",
                      namespace: str = "") -> str:
    """The proto3 schema (``.proto`` text) for writing a struct column of Arrow type ``t``:
    one message named ``record_name`` in package ``namespace``, fields numbered in column order.

    Structs are nested messages (named after their field), arrays ``repeated``, maps ``map<>``,
    timestamps ``google.protobuf.Timestamp``, day-time intervals ``google.protobuf.Duration``;
    a nullable scalar is a proto3 ``optional`` field, so a null reads back as null, not as 0.
    A type with no Protobuf form raises SchemaFormatError naming the field."""
    if not pa.types.is_struct(t):
        raise SchemaFormatError(f"a Protobuf schema is derived from a struct column, not {t}")
    _identifier(record_name, "the message name (option valueRecordName/keyRecordName)")
    if namespace:
        for part in namespace.split("."):
            _identifier(part, f"the package {namespace!r} (option valueRecordNamespace/"
                              "keyRecordNamespace)")
    imports: set[str] = set()
    body = _message_lines(t, record_name, "", imports)
    head = ['syntax = "proto3";']
    if namespace:
        head.append(f"package {namespace};")
    head += [f'import "{name}";' for name in sorted(imports)]
    return "\n".join(head + [""] + body) + "\n"


def _identifier(name: str, what: str) -> None:
    if not _IDENT.match(name):
        raise SchemaFormatError(
            f"{what}: {name!r} is not a Protobuf identifier (letters, digits and _, not "
            "starting with a digit); rename it")


def _message_lines(t: pa.DataType, name: str, path: str, imports: set[str]) -> list[str]:
    taken = {f.name for f in t} | {name}
    fields: list[str] = []
    nested: list[str] = []

    def message_for(sub: pa.DataType, field_name: str, where: str) -> str:
        base = "".join(p[:1].upper() + p[1:] for p in field_name.split("_") if p) or "Message"
        msg, k = base, 2
        while msg in taken:
            msg, k = f"{base}{k}", k + 1
        taken.add(msg)
        nested.extend("  " + line for line in _message_lines(sub, msg, where + ".", imports))
        return msg

    def single(sub: pa.DataType, field_name: str, where: str) -> str:
        if pa.types.is_struct(sub):
            return message_for(sub, field_name, where)
        if pa.types.is_timestamp(sub):
            imports.add(_TIMESTAMP)
            return "google.protobuf.Timestamp"
        if pa.types.is_duration(sub):
            imports.add(_DURATION)
            return "google.protobuf.Duration"
        for test, proto in _PROTO_SCALARS:
            if test(sub):
                return proto
        hint = ""
        if pa.types.is_date(sub):
            hint = "; cast it to a timestamp or a string"
        elif pa.types.is_decimal(sub):
            hint = "; cast it to a double or a string"
        elif _repeated_type(sub) or pa.types.is_map(sub):
            hint = ("; Protobuf has no array or map directly inside an array or a map's value: "
                    "wrap the inner one in a struct")
        raise SchemaFormatError(
            f"field {where!r}: the type {sub} has no Protobuf type txkafka derives{hint}")

    json_names: dict[str, str] = {}
    for number, f in enumerate(t, start=1):
        where = f"{path}{f.name}"
        _identifier(f.name, f"field {where!r}")
        # protoc and ptars refuse two fields whose camelCase JSON names differ only in case.
        other = json_names.setdefault(_json_name(f.name).lower(), f.name)
        if other != f.name:
            raise SchemaFormatError(
                f"fields {path + other!r} and {where!r} have the same Protobuf JSON name "
                "(camelCase, ignoring case), which Protobuf refuses; rename one")
        ft = f.type
        if _repeated_type(ft):
            decl = f"repeated {single(ft.value_type, f.name, where + '[]')}"
        elif pa.types.is_map(ft):
            key = _MAP_KEYS.get(ft.key_type)
            if key is None:
                raise SchemaFormatError(
                    f"field {where!r}: a map with {ft.key_type} keys; Protobuf map keys are "
                    "integers, booleans or strings")
            decl = f"map<{key}, {single(ft.item_type, f.name + '_value', where + '{}')}>"
        else:
            proto = single(ft, f.name, where)
            scalar = not (pa.types.is_struct(ft) or pa.types.is_timestamp(ft)
                          or pa.types.is_duration(ft))
            decl = f"optional {proto}" if f.nullable and scalar else proto
        fields.append(f"  {decl} {f.name} = {number};")
    return [f"message {name} {{", *fields, *nested, "}"]


def _json_name(name: str) -> str:
    """protoc's JSON name of a field: underscores dropped, the letter after each upper-cased."""
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _repeated_type(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
