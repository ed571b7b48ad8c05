"""A framed key or value column to a typed Arrow column and back, a record batch at a time.

Reading: the wire header of every row is read at once (``wire.split_column``); rows are grouped by
their writer schema id, each group decoded by the codec of (writer schema, the query's reader
schema), so records written with older or newer versions are resolved by the format's own rules;
the groups are put back in row order by one ``take``. Writing: one codec for the chosen schema
encodes the struct column, and the header is prepended column-wise.

Codecs and schemas are cached per worker process (``_CODECS``, ``registry.registry_for``): a
running query asks the registry only for schema ids it has not seen.
"""

from __future__ import annotations

import importlib
import itertools
import threading
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import KafkaConfigError, RecordFormatError
from .columns import ints, mask as bool_mask
from .options import ColumnFormat, FormatOptions
from .registry import SCHEMA_TYPES, RegisteredSchema, SchemaNotFoundError, registry_for
from .wire import frame_column, split_column

_MODULES = {"avro": "avro", "protobuf": "protobuf", "json-schema": "json_schema"}
_CODECS: dict[tuple, object] = {}
_CODECS_LOCK = threading.Lock()
_SHOWN_ERRORS = 3  # rows named in a FAILFAST error


def format_module(fmt: str):
    """The codec module of a format (imported on first use: a query pays only for its own)."""
    return importlib.import_module(f"{__package__}.{_MODULES[fmt]}")


def _references(schema: RegisteredSchema) -> Optional[dict[str, str]]:
    return dict(schema.references) if schema.references else None


def make_codec(fmt: ColumnFormat, writer: RegisteredSchema, reader: RegisteredSchema):
    """The codec reading ``writer``'s records as ``reader``'s type (cached per process), each
    schema with the schemas its registry references name (fetched and cached by the registry
    client).

    Avro resolves a writer schema to the reader schema (its evolution rules); Protobuf and JSON
    Schema payloads carry field numbers and names, so the reader schema decodes every version."""
    key = (fmt.format, fmt.message, writer.schema_id, writer.text, writer.references,
           reader.schema_id, reader.text, reader.references)
    codec = _CODECS.get(key)
    if codec is not None:
        return codec
    mod = format_module(fmt.format)
    if fmt.format == "avro":
        codec = mod.codec(writer.text, reader.text,
                          writer_references=[text for _, text in writer.references],
                          reader_references=[text for _, text in reader.references])
    elif fmt.format == "protobuf":
        codec = mod.codec(reader.text, references=_references(reader), message=fmt.message)
    else:
        codec = mod.codec(reader.text, references=_references(reader))
    with _CODECS_LOCK:
        _CODECS[key] = codec
    return codec


def arrow_type_of(fmt: ColumnFormat, schema: RegisteredSchema) -> pa.DataType:
    """The Arrow type a column of ``schema`` decodes to."""
    return make_codec(fmt, schema, schema).arrow_type


def check_schema_type(fmt: ColumnFormat, schema: RegisteredSchema, what: str) -> Optional[str]:
    """What is wrong when ``schema`` is not of the column's format, else None."""
    want = SCHEMA_TYPES[fmt.format]
    if (schema.schema_type or "AVRO").upper() != want:
        return (f"{what} is a {schema.schema_type} schema, but option '{fmt.column}Format' is "
                f"{fmt.format}")
    return None


@dataclass(frozen=True)
class ColumnPlan:
    """One column's format and the query's reader schema, resolved on the driver (picklable)."""

    fmt: ColumnFormat
    schema: RegisteredSchema


@dataclass(frozen=True)
class DecodePlan:
    """What a read task needs to decode: the formats and the reader schemas."""

    options: FormatOptions
    key: Optional[ColumnPlan]
    value: Optional[ColumnPlan]

    def columns(self) -> list[ColumnPlan]:
        return [c for c in (self.key, self.value) if c is not None]


def resolve_reader_schema(options: FormatOptions, fmt: ColumnFormat,
                          topic: Optional[str]) -> RegisteredSchema:
    """The query's schema for one column: pinned id, pinned subject version, or the latest."""
    reg = registry_for(options.registry)
    if fmt.schema_id is not None:
        schema = reg.by_id(fmt.schema_id)
    else:
        schema = reg.version(fmt.subject_for(topic, None), fmt.version)
    problem = check_schema_type(fmt, schema, f"schema id {schema.schema_id}")
    if problem:
        raise KafkaConfigError(problem)
    return schema


@dataclass
class Decoded:
    values: pa.Array
    raw: Optional[pa.Array]     # PERMISSIVE: the bad rows' bytes (null elsewhere)
    error: Optional[pa.Array]   # PERMISSIVE: what was wrong (null elsewhere)


def decode_column(plan: ColumnPlan, options: FormatOptions, values: pa.Array,
                  where: Callable[[int], str]) -> Decoded:
    """Decode one framed column; bad rows raise (FAILFAST) or become null plus raw and error."""
    fmt, reader = plan.fmt, plan.schema
    reader_codec = make_codec(fmt, reader, reader)
    split = split_column(values)
    bad = dict(split.bad)
    n = len(values)
    ids = split.ids
    present = np.unique(ids[ids >= 0])
    groups: list[tuple[np.ndarray, pa.Array]] = []
    reg = registry_for(options.registry)
    for sid in present:
        sid = int(sid)
        rows = np.flatnonzero(ids == sid) if len(present) > 1 or (ids < 0).any() else None
        try:
            writer = reader if sid == reader.schema_id else reg.by_id(sid)
        except SchemaNotFoundError:
            for i in (rows if rows is not None else range(n)):
                bad[int(i)] = f"unknown schema id {sid}: the registry has no schema with this id"
            continue
        problem = check_schema_type(fmt, writer, f"the record's schema id {sid}")
        if problem is None:
            codec = make_codec(fmt, writer, reader)
            payloads = split.payloads if rows is None else split.payloads.take(rows)
            result = codec.decode(payloads)
            for i, msg in result.errors.items():
                bad[int(rows[i]) if rows is not None else int(i)] = (
                    f"payload does not decode with schema id {sid}: {msg}")
            if rows is None:
                groups.append((np.arange(n), result.values))
                break
            groups.append((rows, result.values))
        else:
            for i in (rows if rows is not None else range(n)):
                bad[int(i)] = problem
    out = _in_row_order(groups, n, reader_codec.arrow_type)
    if bad and not options.permissive:
        first = sorted(bad)[:_SHOWN_ERRORS]
        more = f" (and {len(bad) - len(first)} more in this batch)" if len(bad) > len(first) else ""
        raise RecordFormatError(
            f"{fmt.column} of " + "; ".join(f"{where(i)}: {bad[i]}" for i in first) + more
            + f". Mode FAILFAST (the default) stops the query; option mode=PERMISSIVE reads such "
              f"records as a null {fmt.column} with the raw bytes and the error in columns "
              f"{fmt.column}Raw and {fmt.column}Error")
    if not options.permissive:
        return Decoded(out, None, None)
    if bad:
        bad_rows = np.zeros(n, dtype=bool)
        bad_rows[list(bad)] = True
        if not out.null_count == n:
            out = pc.if_else(bool_mask(~bad_rows), out, pa.scalar(None, out.type))
        raw = pc.if_else(bool_mask(bad_rows), values.cast(pa.binary()),
                                 pa.scalar(None, pa.binary()))
        err = pa.array([bad.get(i) for i in range(n)], pa.string())
    else:
        raw, err = pa.nulls(n, pa.binary()), pa.nulls(n, pa.string())
    return Decoded(out, raw, err)


def decoded_schema(base: pa.Schema, plan: DecodePlan) -> pa.Schema:
    """``base`` (the binary record schema) with key and/or value typed; in PERMISSIVE mode, the
    raw bytes and the error of each decoded column appended (``valueRaw``, ``valueError``)."""
    schema = base
    for col in plan.columns():
        i = schema.get_field_index(col.fmt.column)
        schema = schema.set(i, pa.field(col.fmt.column, arrow_type_of(col.fmt, col.schema)))
    if plan.options.permissive:
        for col in plan.columns():
            schema = schema.append(pa.field(f"{col.fmt.column}Raw", pa.binary()))
            schema = schema.append(pa.field(f"{col.fmt.column}Error", pa.string()))
    return schema


def decode_record_batch(batch: pa.RecordBatch, plan: DecodePlan, topic: str,
                        partition: int) -> pa.RecordBatch:
    """One read batch with its framed key and/or value decoded (see :func:`decoded_schema`)."""
    offsets = batch.column("offset").to_numpy()

    def where(i: int) -> str:
        return f"topic {topic!r} partition {partition} offset {int(offsets[i])}"

    arrays = list(batch.columns)
    extra: list[pa.Array] = []
    for col in plan.columns():
        i = batch.schema.get_field_index(col.fmt.column)
        decoded = decode_column(col, plan.options, batch.column(i), where)
        arrays[i] = decoded.values
        if decoded.raw is not None:
            extra += [decoded.raw, decoded.error]
    return pa.RecordBatch.from_arrays(arrays + extra,
                                      schema=decoded_schema(batch.schema, plan))


def _in_row_order(groups: list[tuple[np.ndarray, pa.Array]], n: int,
                  arrow_type: pa.DataType) -> pa.Array:
    """The groups' values back in row order; rows in no group are null."""
    if len(groups) == 1 and len(groups[0][0]) == n:
        return groups[0][1]
    covered = np.zeros(n, dtype=bool)
    rows_list, values_list = [], []
    for rows, vals in groups:
        covered[rows] = True
        rows_list.append(rows)
        values_list.append(vals.cast(arrow_type) if vals.type != arrow_type else vals)
    rest = np.flatnonzero(~covered)
    rows_list.append(rest)
    values_list.append(pa.nulls(len(rest), arrow_type))
    order = np.concatenate(rows_list)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    return pa.concat_arrays(values_list).take(ints(inverse))


# ---- writing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EncodePlan:
    """What a write task needs: per column, its format and the schema (with its id) to write."""

    key: Optional[ColumnPlan]
    value: Optional[ColumnPlan]


def resolve_writer_schema(options: FormatOptions, fmt: ColumnFormat, topic: Optional[str],
                          arrow_type: pa.DataType) -> RegisteredSchema:
    """The schema a writer writes (on the driver, before the tasks): pinned id or version, the
    subject's latest (``use.latest.version``), or the DataFrame's own, registered (idempotent:
    the same schema keeps its id) with ``auto.register.schemas`` or else looked up."""
    reg = registry_for(options.registry)
    fullname = (f"{fmt.record_namespace}.{fmt.record_name}" if fmt.record_namespace
                else fmt.record_name)
    if fmt.schema_id is not None:
        schema = reg.by_id(fmt.schema_id)
    elif fmt.version is not None or options.use_latest_version:
        schema = reg.version(fmt.subject_for(topic, fullname), fmt.version)
    else:
        # Each format derives its schema from the column's Arrow type (a type without a form
        # in the format is refused there, naming the field).
        text = format_module(fmt.format).schema_from_arrow(arrow_type, fmt.record_name,
                                                           fmt.record_namespace)
        subject = fmt.subject_for(topic, fullname)
        schema_type = SCHEMA_TYPES[fmt.format]
        if options.auto_register:
            schema = reg.by_id(reg.register(subject, schema_type, text))
        else:
            schema = reg.lookup(subject, schema_type, text)
    problem = check_schema_type(fmt, schema, f"schema id {schema.schema_id}")
    if problem:
        raise KafkaConfigError(problem)
    return schema


# A nested column's encode is many numpy passes per call (per field, per list level), so Spark's
# Arrow batches of 10,000 rows (spark.sql.execution.arrow.maxRecordsPerBatch) pay that fixed
# cost ten times per 100,000 rows: such batches are joined first (bounded by rows and bytes).
# A codec may set a lower bound of bytes (``join_bytes``): Avro's encoder cuts a column into
# slices of that size anyway, so joining past it only copies.
_COALESCE_ROWS = 1 << 17
_COALESCE_BYTES = 32 << 20


def _is_nested(t: pa.DataType) -> bool:
    """A struct with a struct, list or map inside (at any depth)."""
    return any(pa.types.is_struct(f.type) or pa.types.is_list(f.type)
               or pa.types.is_large_list(f.type) or pa.types.is_map(f.type)
               for f in t) if pa.types.is_struct(t) else False


def _joined(group: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(group) == 1:
        return group[0]
    return pa.RecordBatch.from_arrays(
        [pa.concat_arrays([b.column(i) for b in group]) for i in range(group[0].num_columns)],
        schema=group[0].schema)


def coalesced(batches, rows: int = _COALESCE_ROWS, nbytes: int = _COALESCE_BYTES):
    """The batches joined, in order, into batches of up to about ``rows`` rows or ``nbytes``
    bytes (a batch over either bound passes alone): the same rows in the same order."""
    group: list[pa.RecordBatch] = []
    n = size = 0
    for batch in batches:
        if group and (n + batch.num_rows > rows or size + batch.nbytes > nbytes
                      or batch.schema != group[0].schema):
            yield _joined(group)
            group, n, size = [], 0, 0
        group.append(batch)
        n += batch.num_rows
        size += batch.nbytes
    if group:
        yield _joined(group)


def encode_record_batches(batches, plan: EncodePlan, topic: Optional[str]):
    """The write task's input with its struct key and/or value encoded and framed; batches with
    a nested formatted column are joined first (:func:`coalesced`)."""
    cols = [c for c in (plan.key, plan.value) if c is not None]
    it = iter(batches)
    head = next(it, None)
    if head is None:
        return
    stream = itertools.chain([head], it)
    nested = [c for c in cols for f in head.schema
              if f.name.lower() == c.fmt.column and _is_nested(f.type)]
    if nested:
        stream = coalesced(stream, nbytes=min(
            getattr(make_codec(c.fmt, c.schema, c.schema), "join_bytes", _COALESCE_BYTES)
            for c in nested))
    seen = 0  # rows of the task's input before this batch: errors count from its start
    for batch in stream:
        arrays, fields = list(batch.columns), list(batch.schema)
        for col in cols:
            i = batch.schema.get_field_index(col.fmt.column)
            arrays[i] = encode_column(col, batch.column(i), topic or "(topic column)", seen)
            fields[i] = pa.field(col.fmt.column, pa.binary())
        seen += batch.num_rows
        yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def encode_column(plan: ColumnPlan, values: pa.Array, topic: str, first_row: int = 0
                  ) -> pa.Array:
    """A struct column to framed payloads; a value that does not fit the schema fails the task
    (rows are numbered from ``first_row``, the task's rows before this column)."""
    codec = make_codec(plan.fmt, plan.schema, plan.schema)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    result = codec.encode(values)
    if result.errors:
        first = sorted(result.errors)[:_SHOWN_ERRORS]
        raise RecordFormatError(
            f"{plan.fmt.column} does not fit schema id {plan.schema.schema_id} (topic "
            f"{topic!r}): " + "; ".join(f"row {first_row + i} of the task's input: "
                                        f"{result.errors[i]}" for i in first)
            + (f" (and {len(result.errors) - len(first)} more)"
               if len(result.errors) > len(first) else ""))
    return frame_column(plan.schema.schema_id, result.payloads)

