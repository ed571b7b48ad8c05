"""JSON Schema payloads (Confluent's wire format) to and from Arrow, a column at a time.

A payload is one UTF-8 JSON document after the 5-byte header. Decoding joins a column's
payloads into newline-delimited JSON and has pyarrow's C++ reader parse them against the
schema's Arrow type; a batch that fails is halved until the failing payloads are found, so bad
rows cost a few more parses and never the good rows. Raw newlines and carriage returns are
whitespace in valid JSON (inside strings they must be escaped), so pretty-printed documents are
flattened by turning them into spaces first. Encoding builds each document from its fields'
JSON text with pyarrow compute and numpy: no ``json.dumps`` per row.

The Arrow type (as Spark's JSON types): ``object`` with ``properties`` is a struct (in the
properties' order), ``object`` with only an ``additionalProperties`` schema a map from string,
``array`` a list of its ``items``, ``string`` a string (``format: date`` date32,
``format: date-time`` timestamp[us, UTC], ``format: datetime-local`` timestamp[us]), ``integer``
int64, ``number`` float64, ``boolean`` bool. ``"null"`` in a type list, ``anyOf``/``oneOf`` of
one schema and ``{"type": "null"}``, ``$ref`` to ``#/$defs/...`` or ``#/definitions/...``
(draft-07 and 2020-12) are followed, and ``$ref`` to another document by the name the registry
gives it as a reference (inlined first).

``date-time`` is RFC 3339's, which requires an offset: an instant (Spark's timestamp). A local
date-time (timestamp_ntz) has none, so it takes the format name HTML's input type and the
mbknor Jackson schema generator use, ``datetime-local``; validators ignore a format they do not
know (as the specification asks), so other tools see a string.

What decoding checks: each value's JSON type against the schema's (a string where an integer is
expected, a fraction in an integer), ``required`` properties present and not null, ``enum``
values of strings, date, date-time and datetime-local formats. What it does not (unless
``validate=True``, which runs the ``jsonschema`` library on every row, slowly): ``pattern``,
lengths, ``minimum`` and ``maximum``, ``additionalProperties: false``, ``const``,
``uniqueItems``, other formats, and combinations beyond those above. Encoding omits null
properties and refuses a row whose required property is null.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ..errors import SchemaFormatError

from . import DecodeResult, EncodeResult, columns

_SCALARS = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(),
            "boolean": pa.bool_()}
_FORMATS = {"date": pa.date32(), "date-time": pa.timestamp("us", "UTC"),
            "datetime-local": pa.timestamp("us")}
# A local date-time as written: no offset; seconds and fraction optional (HTML's input type);
# digits beyond microseconds are cut, as Spark keeps microseconds.
_LOCAL_DATE_TIME = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?$"


@dataclass
class _Node:
    """One schema position: its Arrow type and what decoding checks there."""

    arrow_type: pa.DataType
    path: str
    kind: str              # struct, list, map, scalar, date, date-time, datetime-local
    children: dict[str, "_Node"] = field(default_factory=dict)  # struct properties
    item: "_Node | None" = None                 # list items, map values
    required: frozenset[str] = frozenset()      # struct: properties that must be present
    nullable: bool = True                       # "null" is among the allowed types
    enum: tuple[str, ...] | None = None         # string enum

    def has(self, predicate: Callable[["_Node"], bool]) -> bool:
        kids = list(self.children.values()) + ([self.item] if self.item else [])
        return predicate(self) or any(k.has(predicate) for k in kids)


class _Converter:
    """JSON Schema document -> _Node tree, following local $refs."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root

    def resolve(self, schema: Any, path: str, seen: tuple[str, ...]) -> tuple[Any, tuple]:
        while isinstance(schema, Mapping) and "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise SchemaFormatError(
                    f"JSON Schema at {path}: $ref {ref!r} points outside the document, and the "
                    "schema has no references; register the document it names as a reference "
                    "of this schema, with that name")
            if ref in seen:
                raise SchemaFormatError(
                    f"JSON Schema at {path}: $ref {ref!r} is recursive; an Arrow (Spark) type "
                    "cannot hold it")
            seen = seen + (ref,)
            target: Any = self.root
            for part in ref[1:].split("/")[1:] if ref != "#" else []:
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, Mapping) or part not in target:
                    raise SchemaFormatError(f"JSON Schema at {path}: $ref {ref!r} is not found")
                target = target[part]
            # Siblings of $ref (2020-12 allows them) add to the target.
            extra = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **extra} if extra and isinstance(target, Mapping) else target
        return schema, seen

    def node(self, schema: Any, path: str, seen: tuple[str, ...] = ()) -> _Node:
        schema, seen = self.resolve(schema, path, seen)
        if schema is True or schema == {}:
            raise SchemaFormatError(
                f"JSON Schema at {path} allows any value; give it a type (an Arrow column has "
                "one)")
        if not isinstance(schema, Mapping):
            raise SchemaFormatError(f"JSON Schema at {path} is not a schema object: {schema!r}")
        nullable = False
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [self.resolve(s, path, seen)[0] for s in schema[key]]
                rest = [s for s in options if not (isinstance(s, Mapping)
                                                   and s.get("type") == "null")]
                if len(rest) != 1:
                    raise SchemaFormatError(
                        f"JSON Schema at {path}: {key} of {len(rest)} non-null schemas has no "
                        "single Arrow type; use one schema (optionally with null)")
                nullable = len(rest) < len(options)
                merged = {k: v for k, v in schema.items() if k != key}
                n = self.node({**merged, **rest[0]} if isinstance(rest[0], Mapping) else rest[0],
                              path, seen)
                n.nullable = n.nullable or nullable
                return n
        if "allOf" in schema:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                part, _ = self.resolve(part, path, seen)
                merged = _merge(merged, part)
            return self.node(merged, path, seen)
        types = schema.get("type")
        if types is None:
            if "properties" in schema or "additionalProperties" in schema:
                types = "object"
            elif "items" in schema:
                types = "array"
            elif "enum" in schema or "const" in schema:
                values = schema.get("enum", [schema.get("const")])
                kinds = {_json_type(v) for v in values if v is not None}
                nullable = None in values
                if len(kinds) != 1:
                    raise SchemaFormatError(
                        f"JSON Schema at {path}: enum of mixed types {sorted(kinds)}")
                types = kinds.pop()
            else:
                raise SchemaFormatError(f"JSON Schema at {path} has no type")
        if isinstance(types, str):
            types = [types]
        kinds = [t for t in types if t != "null"]
        nullable = nullable or "null" in types
        if set(kinds) == {"integer", "number"}:
            kinds = ["number"]
        if len(kinds) != 1:
            raise SchemaFormatError(
                f"JSON Schema at {path}: type {types!r} has no single Arrow type; use one type "
                "(optionally with \"null\")")
        kind = kinds[0]
        if kind == "object":
            return self.object(schema, path, seen, nullable)
        if kind == "array":
            if "items" not in schema or isinstance(schema["items"], list):
                raise SchemaFormatError(
                    f"JSON Schema at {path}: an array needs one \"items\" schema")
            item = self.node(schema["items"], f"{path}[]", seen)
            return _Node(pa.list_(pa.field("element", item.arrow_type)), path, "list",
                         item=item, nullable=nullable)
        if kind == "string" and schema.get("format") in _FORMATS:
            fmt = schema["format"]
            return _Node(_FORMATS[fmt], path, fmt, nullable=nullable)
        if kind not in _SCALARS:
            raise SchemaFormatError(f"JSON Schema at {path}: unknown type {kind!r}")
        enum = None
        if kind == "string" and isinstance(schema.get("enum"), list):
            enum = tuple(v for v in schema["enum"] if isinstance(v, str))
        return _Node(_SCALARS[kind], path, "scalar", nullable=nullable, enum=enum)

    def object(self, schema: Mapping, path: str, seen: tuple, nullable: bool) -> _Node:
        props = schema.get("properties")
        if props:
            children = {name: self.node(sub, f"{path}.{name}" if path != "$" else f"$.{name}",
                                        seen) for name, sub in props.items()}
            return _Node(pa.struct([pa.field(k, c.arrow_type) for k, c in children.items()]),
                         path, "struct", children=children,
                         required=frozenset(schema.get("required", ())) & set(children),
                         nullable=nullable)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            item = self.node(extra, f"{path}{{}}", seen)
            if item.kind != "scalar":
                raise SchemaFormatError(
                    f"JSON Schema at {path}: a map's values (additionalProperties) must be "
                    "strings, numbers, integers or booleans here")
            return _Node(pa.map_(pa.string(), item.arrow_type), path, "map", item=item,
                         nullable=nullable)
        raise SchemaFormatError(
            f"JSON Schema at {path}: an object with neither \"properties\" nor an "
            "\"additionalProperties\" schema has no Arrow type; declare its properties, or its "
            "values' type in additionalProperties (a map)")


def _merge(a: Mapping, b: Mapping) -> dict:
    """allOf parts merged: properties and required united, other keys from the later part."""
    out = {**a, **b}
    if "properties" in a or "properties" in b:
        out["properties"] = {**a.get("properties", {}), **b.get("properties", {})}
    if "required" in a or "required" in b:
        out["required"] = list(dict.fromkeys([*a.get("required", []), *b.get("required", [])]))
    return out


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _json_type(v: Any) -> str:
    """The JSON Schema type of a value that ``json.loads`` made."""
    return _JSON_TYPES.get(type(v), type(v).__name__)


def codec(schema: str, validate: bool = False,
          references: Mapping[str, str] | None = None) -> "JsonSchemaCodec":
    """A codec for one JSON Schema document (draft-07 or 2020-12). ``references`` maps the
    names its ``$ref``s use for other documents (a registry's references) to their texts.
    ``validate=True`` also runs the ``jsonschema`` library on every decoded row (every
    keyword, per row, slowly)."""
    document = _loads(schema, "the JSON Schema")
    if references:
        docs = {name: _loads(text, f"the referenced JSON Schema {name!r}")
                for name, text in references.items()}
        document = _inlined(document, document, docs, ())
    return JsonSchemaCodec(document, validate)


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as e:
        raise SchemaFormatError(f"{what} is not JSON: {e}") from e


def _inlined(node: Any, root: Any, docs: Mapping[str, Any], seen: tuple) -> Any:
    """``node`` with every ``$ref`` replaced by what it points to: in ``root`` (``#...``) or in
    the referenced document it names (``name`` or ``name#/pointer``, the name as registered), so
    the codec sees one self-contained document."""
    if isinstance(node, list):
        return [_inlined(x, root, docs, seen) for x in node]
    if not isinstance(node, Mapping):
        return node
    ref = node.get("$ref")
    if not isinstance(ref, str):
        # Definitions are reached through the $refs that name them (from the original
        # documents), so they are left as they are: one that is never used is never followed.
        return {k: v if k in ("$defs", "definitions") else _inlined(v, root, docs, seen)
                for k, v in node.items()}
    name, _, pointer = ref.partition("#")
    target_root = root
    if name:
        if name not in docs:
            raise SchemaFormatError(
                f"JSON Schema $ref {ref!r} names {name!r}, which is not among the schema's "
                f"references ({', '.join(sorted(docs)) or 'none'}); register it as a reference "
                "with that name")
        target_root = docs[name]
    key = (id(target_root), pointer)
    if key in seen:
        raise SchemaFormatError(f"JSON Schema $ref {ref!r} is recursive; an Arrow (Spark) type "
                                "cannot hold it")
    target = target_root
    for part in pointer.split("/")[1:] if pointer else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, Mapping) or part not in target:
            raise SchemaFormatError(f"JSON Schema $ref {ref!r} is not found")
        target = target[part]
    resolved = _inlined(target, target_root, docs, seen + (key,))
    extra = {k: _inlined(v, root, docs, seen) for k, v in node.items() if k != "$ref"}
    return {**resolved, **extra} if extra and isinstance(resolved, Mapping) else resolved


# --------------------------------------------------------------------------- Arrow helpers

def _concat(parts: list[pa.Array | bytes], n: int) -> pa.Array:
    """Element-wise concatenation of null-free string arrays and constant strings."""
    if not n:
        return pa.nulls(0, pa.string()).fill_null("")
    args = [pa.scalar(p.decode(), pa.string()) if isinstance(p, (bytes, bytearray)) else p
            for p in parts]
    if all(isinstance(a, pa.Scalar) for a in args):
        args.append(pa.nulls(n, pa.string()).fill_null(""))
    return pc.binary_join_element_wise(*args, "")


# --------------------------------------------------------------------------- JSON text pieces

_ESCAPES = [("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"),
            ("\b", "\\b"), ("\f", "\\f")]
_OTHER_CONTROLS = [chr(c) for c in range(0x20) if chr(c) not in "\n\r\t\b\f"]


def _quoted(strings: pa.Array) -> pa.Array:
    """JSON string literals of a null-free string array."""
    s = strings
    for raw, escaped in _ESCAPES:
        s = pc.replace_substring(s, raw, escaped)
    if pc.any(pc.match_substring_regex(s, "[\\x00-\\x1f]")).as_py():
        for c in _OTHER_CONTROLS:
            s = pc.replace_substring(s, c, f"\\u{ord(c):04x}")
    return _concat([b'"', s, b'"'], len(s))


class JsonSchemaCodec:
    """One JSON Schema: decode and encode whole Arrow columns."""

    def __init__(self, document: Any, validate: bool = False) -> None:
        self.document = document
        self._root = _Converter(document if isinstance(document, Mapping) else {}) \
            .node(document, "$")
        if self._root.kind != "struct":
            raise SchemaFormatError(
                "the JSON Schema's top level must be an object with properties (a Spark row); "
                f"it is {self._root.arrow_type}")
        self.arrow_type: pa.DataType = self._root.arrow_type
        self._has_maps = self._root.has(lambda node: node.kind == "map")
        self._read_schema = pa.schema(list(_read_type(self._root, {})))
        self._validator = None
        if validate:
            try:
                import jsonschema
            except ImportError as e:
                raise SchemaFormatError(
                    "validate=True needs the jsonschema package: pip install "
                    "'txkafka[jsonschema]'") from e
            cls = jsonschema.validators.validator_for(document)
            try:
                cls.check_schema(document)
            except jsonschema.SchemaError as e:
                raise SchemaFormatError(f"the JSON Schema is not valid: {e.message}") from e
            self._validator = cls(document, format_checker=cls.FORMAT_CHECKER)

    def __reduce__(self):
        # Pickled as its schema (Spark ships a codec made on the driver to its executors).
        return JsonSchemaCodec, (self.document, self._validator is not None)

    # ------------------------------------------------------------------ decode

    def decode(self, payloads: pa.Array) -> DecodeResult:
        """One struct per payload (UTF-8 JSON after the 5-byte header): null for a null payload
        and for each row in ``errors``."""
        if isinstance(payloads, pa.ChunkedArray):
            payloads = payloads.combine_chunks()
        if not (pa.types.is_binary(payloads.type) or pa.types.is_string(payloads.type)):
            payloads = payloads.cast(pa.binary())
        n = len(payloads)
        rows, present = columns.null_free(payloads)
        offsets, data = columns.offsets_and_data(present)
        data = data.copy()
        # Raw line breaks are whitespace in valid JSON (inside a string they must be escaped):
        # as spaces they keep a pretty-printed document whole.
        data[(data == 10) | (data == 13)] = 32
        # Each document must open with "{": a blank one would vanish from the parsed text, and
        # pyarrow's reader crashes on a text that opens with a top-level null.
        opening = np.zeros(len(present), dtype=np.uint8)
        nonempty = offsets[1:] > offsets[:-1]
        opening[nonempty] = data[offsets[:-1][nonempty]]
        errors: dict[int, str] = {}
        refused = np.zeros(len(present), dtype=bool)
        for j in np.flatnonzero(opening != 0x7B):  # rare: looked at one by one
            text = bytes(data[offsets[j]:offsets[j + 1]]).lstrip(b" \t")
            if not text.startswith(b"{"):
                refused[j] = True
                errors[int(rows[j])] = "the payload is empty, not a JSON document" if not text \
                    else f"the payload is not a JSON object: it starts with {text[:20]!r}"
        docs = pa.Array.from_buffers(pa.binary(), len(present), [
            None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])
        # JSON text is UTF-8, and pyarrow's reader would pass bad bytes on into strings.
        _, not_utf8 = columns.by_halves(docs, lambda d: d.cast(pa.string()), str, pa.string())
        for j in not_utf8:
            if not refused[j]:
                refused[j] = True
                errors[int(rows[j])] = "the payload is not UTF-8 text, as JSON must be"
        good = np.flatnonzero(~refused)
        raw, bad = columns.by_halves(
            docs.filter(columns.mask(~refused)) if refused.any() else docs, self._read,
            _json_error, self._read_type(), _concat_structs)
        for j, why in bad.items():
            errors[int(rows[good[j]])] = why
        keep = ~refused
        keep[good[list(bad)]] = False
        table = columns.spread(raw, good, len(present))
        values = _finish(table, self._root, keep, errors, rows)
        if self._validator is not None:
            self._validate(present, keep, errors, rows)
        values = values.filter(columns.mask(keep)) if not keep.all() else values
        return DecodeResult(columns.spread(values, rows[keep], n), dict(sorted(errors.items())))

    def _read(self, docs: pa.Array) -> pa.Array:
        """Null-free, non-blank documents parsed as one struct array. The documents' bytes,
        back to back, are the text: the reader takes whitespace-separated JSON values on a
        line, and a count that differs from the payloads' is a failure like any other."""
        bufs = docs.buffers()
        offsets = np.frombuffer(bufs[1], np.int32)[docs.offset:docs.offset + len(docs) + 1]
        lo, hi = int(offsets[0]), int(offsets[-1])
        text = bufs[2].slice(lo, hi - lo)
        read_options = pj.ReadOptions(use_threads=False, block_size=max(1 << 20, hi - lo + 1))
        if self._has_maps:
            # Maps have no fixed keys: the reader infers them, and their values' types. Where
            # a type is not the schema's (it takes a date-like string for a timestamp), a
            # second pass reads each map as a struct of the keys found, all of the values' type.
            table = pj.read_json(pa.BufferReader(text), read_options=read_options,
                                 parse_options=pj.ParseOptions(
                                     explicit_schema=self._read_schema,
                                     unexpected_field_behavior="infer"))
            keys: dict[str, list[str]] = {}
            if not _map_keys(self._root, pa.struct(list(table.schema)), keys):
                table = pj.read_json(pa.BufferReader(text), read_options=read_options,
                                     parse_options=pj.ParseOptions(
                                         explicit_schema=pa.schema(list(
                                             _read_type(self._root, keys))),
                                         unexpected_field_behavior="ignore"))
        else:
            table = pj.read_json(pa.BufferReader(text), read_options=read_options,
                                 parse_options=pj.ParseOptions(
                                     explicit_schema=self._read_schema,
                                     unexpected_field_behavior="ignore"))
        if table.num_rows != len(docs):
            raise ValueError(f"{table.num_rows} JSON documents in {len(docs)} payloads")
        if not table.num_columns:
            return pa.array([{}] * table.num_rows, pa.struct([]))
        return pa.StructArray.from_arrays([c.combine_chunks() for c in table.columns],
                                          fields=list(table.schema))

    def _read_type(self) -> pa.DataType:
        return pa.struct(list(self._read_schema))

    def _validate(self, present: pa.Array, keep: np.ndarray, errors: dict[int, str],
                  rows: np.ndarray) -> None:
        """The jsonschema library's verdict on each row that decoded (opt-in: per row)."""
        for j in np.flatnonzero(keep):
            doc = json.loads(present[int(j)].as_py())
            problem = next(iter(self._validator.iter_errors(doc)), None)
            if problem is not None:
                where = "$" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}"
                                      for p in problem.absolute_path)
                errors[int(rows[j])] = f"the JSON document does not match the schema at " \
                                       f"{where}: {problem.message}"
                keep[j] = False

    # ------------------------------------------------------------------ encode

    def encode(self, values: pa.Array) -> EncodeResult:
        """One UTF-8 JSON document per struct: null for a null value and for each row in
        ``errors``."""
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        try:
            values = values.cast(self.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise SchemaFormatError(
                f"values of type {values.type} cannot be written with this JSON Schema (Arrow "
                f"type {self.arrow_type}): {e}") from e
        n = len(values)
        rows, present = columns.null_free(values)
        bad: dict[int, str] = {}
        text = _to_json(present, self._root, np.arange(len(present)), bad)
        errors = {int(rows[j]): why for j, why in bad.items()}
        payloads, rows = columns.drop_rows(text.cast(pa.binary()), rows, bad)
        return EncodeResult(columns.spread(payloads, rows, n), dict(sorted(errors.items())))


def _json_error(e: Exception) -> str:
    text = str(e).split("\n")[0]
    if "documents in" in text:
        return "the payload holds more than one JSON document"
    return f"the payload is not a JSON document of the schema: {text}"


def _concat_structs(a: pa.Array, b: pa.Array) -> pa.Array:
    """Two halves' struct arrays as one (their inferred map children may differ: unified)."""
    if a.type == b.type:
        return pa.concat_arrays([a, b])
    table = pa.concat_tables([pa.Table.from_struct_array(a), pa.Table.from_struct_array(b)],
                             promote_options="permissive")
    return pa.StructArray.from_arrays([c.combine_chunks() for c in table.columns],
                                      fields=list(table.schema))


def _read_type(node: _Node, keys: Mapping[str, list[str]]) -> pa.DataType:
    """What pyarrow's JSON reader is asked for: dates as strings (it parses no date32); a map
    as a struct of the keys found for it (``keys`` by the map's path; none when left out)."""
    if node.kind == "struct":
        return pa.struct([pa.field(k, _read_type(c, keys)) for k, c in node.children.items()
                          if c.kind != "map" or c.path in keys])
    if node.kind == "list":
        return pa.list_(pa.field("element", _read_type(node.item, keys)))
    if node.kind == "map":
        return pa.struct([pa.field(k, node.item.arrow_type) for k in keys[node.path]])
    if node.kind in ("date", "datetime-local"):
        return pa.string()
    return node.arrow_type


def _map_keys(node: _Node, inferred: pa.DataType, keys: dict[str, list[str]]) -> bool:
    """The keys each map of ``node`` holds in the reader's inferred type (into ``keys``), and
    whether every inferred value type is the schema's (or null; integers for numbers)."""
    fits = True
    if node.kind == "map":
        found = list(inferred) if pa.types.is_struct(inferred) else []
        keys[node.path] = list(dict.fromkeys(keys.get(node.path, []) + [f.name for f in found]))
        wanted = node.item.arrow_type
        fits = pa.types.is_struct(inferred) or pa.types.is_null(inferred)
        for f in found:
            fits = fits and (f.type == wanted or pa.types.is_null(f.type) or (
                pa.types.is_integer(f.type) and pa.types.is_floating(wanted)))
    elif node.kind == "struct" and pa.types.is_struct(inferred):
        for name, child in node.children.items():
            if inferred.get_field_index(name) >= 0:
                fits = _map_keys(child, inferred.field(name).type, keys) and fits
            elif child.kind == "map":
                keys.setdefault(child.path, [])
    elif node.kind == "list" and (pa.types.is_list(inferred) or pa.types.is_large_list(inferred)):
        fits = _map_keys(node.item, inferred.value_type, keys)
    return fits


# --------------------------------------------------------------------------- decoded -> final

def _finish(raw: pa.Array, node: _Node, keep: np.ndarray, errors: dict[int, str],
            rows: np.ndarray) -> pa.Array:
    """The read struct array as the schema's Arrow type, marking rows that break the checks
    Arrow's parse does not make (required, enum, date, map values) in ``keep``/``errors``."""
    return _convert(raw, node, np.arange(len(raw)), keep, errors, rows)


def _fail(j: int, why: str, keep: np.ndarray, errors: dict[int, str], rows: np.ndarray) -> None:
    if keep[j]:
        keep[j] = False
        errors[int(rows[j])] = why


def _convert(arr: pa.Array, node: _Node, owner: np.ndarray, keep: np.ndarray,
             errors: dict[int, str], rows: np.ndarray) -> pa.Array:
    """``arr`` (one element per ``owner`` row) converted to ``node``'s type."""
    if node.kind == "struct":
        names = set(arr.type.names) if pa.types.is_struct(arr.type) else set()
        children, fields = [], []
        parent_valid = columns.bools(arr.is_valid())
        for name, child in node.children.items():
            col = pc.struct_field(arr, name) if name in names else pa.nulls(len(arr),
                                                                             child.arrow_type)
            if name in node.required and (not child.nullable or child.kind == "map"):
                missing = parent_valid & ~columns.bools(col.is_valid())
                for j in np.flatnonzero(missing):
                    _fail(int(owner[j]), f"required property {child.path} is missing or null",
                          keep, errors, rows)
            children.append(_convert(col, child, owner, keep, errors, rows))
            fields.append(pa.field(name, child.arrow_type))
        mask = None if arr.null_count == 0 else pc.invert(arr.is_valid())
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask) if children \
            else arr
    if node.kind == "list":
        flat = pc.list_flatten(arr)
        parents = np.asarray(pc.list_parent_indices(arr), dtype=np.int64)
        items = _convert(flat, node.item, owner[parents], keep, errors, rows)
        offsets = arr.offsets
        if arr.offset or int(offsets[0].as_py()):
            offsets = pc.subtract(offsets, offsets[0])
        return pa.ListArray.from_arrays(offsets, items, type=node.arrow_type,
                                        mask=pc.invert(arr.is_valid()) if arr.null_count else None)
    if node.kind == "map":
        return _to_map(arr, node, owner, keep, errors, rows)
    if node.kind == "date":
        parsed = pc.strptime(arr, format="%Y-%m-%d", unit="s", error_is_null=True)
        # strptime rolls 2024-02-30 over to March: a date must print back as it was written.
        same = pc.equal(pc.strftime(parsed, format="%Y-%m-%d"), arr)
        wrong = columns.bools(arr.is_valid()) & ~columns.bools(same.fill_null(False))
        for j in np.flatnonzero(wrong):
            _fail(int(owner[j]), f"{node.path}: {arr[int(j)].as_py()!r} is not a date "
                                 "(YYYY-MM-DD)", keep, errors, rows)
        return parsed.cast(pa.date32())
    if node.kind == "datetime-local":
        return _local_date_times(arr, node, owner, keep, errors, rows)
    if node.enum is not None and len(arr):
        outside = columns.bools(pc.invert(pc.is_in(arr, value_set=pa.array(node.enum, pa.string())))
                           .fill_null(False)) & columns.bools(arr.is_valid())
        for j in np.flatnonzero(outside):
            _fail(int(owner[j]), f"{node.path}: {arr[int(j)].as_py()!r} is not one of "
                                 f"{list(node.enum)}", keep, errors, rows)
    return arr if arr.type == node.arrow_type else arr.cast(node.arrow_type)


def _local_date_times(arr: pa.Array, node: _Node, owner: np.ndarray, keep: np.ndarray,
                      errors: dict[int, str], rows: np.ndarray) -> pa.Array:
    """Strings of local date-times as timestamp[us]: one with an offset (an instant, which
    has no single wall-clock time), or that is no date-time, marks its row."""
    if arr.null_count == len(arr):
        return pa.nulls(len(arr), node.arrow_type)
    shaped = columns.bools(pc.match_substring_regex(arr, _LOCAL_DATE_TIME).fill_null(False))
    text = pc.if_else(columns.mask(shaped), pc.replace_substring_regex(
        arr, r"(\.\d{6})\d+$", r"\1"), pa.scalar(None, pa.string()))
    # The cast checks the calendar (2024-02-30 fails it); a failing row is found by halves.
    parsed, impossible = columns.by_halves(text, lambda a: a.cast(node.arrow_type), str,
                                           node.arrow_type)
    wrong = columns.bools(arr.is_valid()) & ~shaped
    wrong[list(impossible)] = True
    for j in np.flatnonzero(wrong):
        _fail(int(owner[j]), f"{node.path}: {arr[int(j)].as_py()!r} is not a local date-time "
                             "(YYYY-MM-DDTHH:MM:SS[.ffffff], without an offset)",
              keep, errors, rows)
    return parsed


def _to_map(arr: pa.Array, node: _Node, owner: np.ndarray, keep: np.ndarray,
            errors: dict[int, str], rows: np.ndarray) -> pa.Array:
    """A struct read with one field per key found in the batch as map<string, value>: an
    absent key and a null value read alike (the reader does not tell them apart)."""
    n = len(arr)
    valid = columns.bools(arr.is_valid())
    value_type = node.item.arrow_type
    if not pa.types.is_struct(arr.type):  # all null, or not objects
        if pa.types.is_null(arr.type):
            return pa.nulls(n, node.arrow_type)
        for j in np.flatnonzero(valid):
            _fail(int(owner[j]), f"{node.path}: not an object", keep, errors, rows)
        return pa.nulls(n, node.arrow_type)
    names = arr.type.names
    per_key = [pc.struct_field(arr, k).cast(value_type) for k in names]
    if not names:
        present = np.zeros((n, 0), dtype=bool)
    else:
        present = np.stack([columns.bools(c.is_valid()) for c in per_key], axis=1) & \
            valid[:, None]
    counts = present.sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    r, k = np.nonzero(present)  # row-major: each row's keys in the batch's key order
    keys = pa.array(names, pa.string()).take(columns.ints(k)) if len(k) else \
        pa.nulls(0, pa.string())
    values = pa.concat_arrays(per_key).take(columns.ints(k * n + r)) if len(k) else \
        pa.nulls(0, value_type)
    offsets_arr = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(offsets)])
    return pa.MapArray.from_arrays(offsets_arr, keys, values, type=node.arrow_type,
                                   mask=columns.mask(~valid) if not valid.all() else None)


# --------------------------------------------------------------------------- Arrow -> JSON

def _to_json(arr: pa.Array, node: _Node, owner: np.ndarray, bad: dict[int, str]) -> pa.Array:
    """JSON text of each element of ``arr`` ("null" for nulls); rows that cannot be written in
    ``bad`` (by ``owner`` position)."""
    n = len(arr)
    valid = columns.bools(arr.is_valid()) if n else np.zeros(0, dtype=bool)
    if node.kind == "struct":
        # Pieces ',"name":value'; a null property is left out (an empty piece). Properties
        # present in every row are joined as they are, with constant text between them; only
        # when the first property can be absent is each row's leading comma cut off after.
        parts: list = []
        always_before = False  # the first piece is a property present in every row
        for name, child in node.children.items():
            col = pc.struct_field(arr, name)
            has = columns.bools(col.is_valid()) & valid
            if name in node.required:
                for j in np.flatnonzero(valid & ~has):
                    bad.setdefault(int(owner[j]), f"required property {child.path} is null")
            text = _to_json(col, child, owner, bad)
            key = _quoted(pa.array([name], pa.string()))[0].as_py().encode() + b":"
            if has[valid].all():
                always_before = always_before or not parts  # the first piece: no comma at all
                parts += [(b"," if parts else b"") + key, text]
            else:
                piece = _concat([b",", key, text], n)
                parts.append(pc.if_else(columns.mask(has), piece, pa.scalar("", pa.string())))
        if not parts:
            text = _concat([b"{}"], n)
        elif always_before:
            text = _concat([b"{", *parts, b"}"], n)
        else:
            body = pc.utf8_slice_codeunits(_concat(parts, n), 1)  # the first piece's comma
            text = _concat([b"{", body, b"}"], n)
    elif node.kind in ("list", "map"):
        if node.kind == "list":
            flat = pc.list_flatten(arr)
            parents = np.asarray(pc.list_parent_indices(arr), dtype=np.int64)
            items = _to_json(flat, node.item, owner[parents], bad)
            opening, closing = b"[", b"]"
        else:
            entries = arr.cast(pa.list_(pa.field("entries", pa.struct(
                [arr.type.key_field, arr.type.item_field]), False)))
            flat = pc.list_flatten(entries)
            keys, values = pc.struct_field(flat, "key"), pc.struct_field(flat, "value")
            parents = np.asarray(pc.list_parent_indices(entries), dtype=np.int64)
            vtext = _to_json(values, node.item, owner[parents], bad)
            items = _concat([_quoted(keys), b":", vtext], len(keys))
            opening, closing = b"{", b"}"
        offsets = arr.offsets
        if int(offsets[0].as_py()):
            offsets = pc.subtract(offsets, offsets[0])
        lists = pa.ListArray.from_arrays(offsets, items)
        inner = pc.binary_join(lists, ",").fill_null("")
        text = _concat([opening, inner, closing], n)
    elif node.kind == "date":
        text = _concat([b'"', pc.strftime(arr, format="%Y-%m-%d").fill_null(""), b'"'], n)
    elif node.kind == "date-time":
        text = _concat([b'"', pc.strftime(arr, format="%Y-%m-%dT%H:%M:%SZ").fill_null(""),
                        b'"'], n)
    elif node.kind == "datetime-local":
        text = _concat([b'"', pc.strftime(arr, format="%Y-%m-%dT%H:%M:%S").fill_null(""),
                        b'"'], n)
    elif pa.types.is_string(arr.type):
        text = _quoted(arr.fill_null(""))
    elif pa.types.is_boolean(arr.type):
        text = pc.if_else(arr.fill_null(False), "true", "false")
    elif pa.types.is_floating(arr.type):
        finite = columns.bools(pc.is_finite(arr).fill_null(True))
        for j in np.flatnonzero(~finite):
            bad.setdefault(int(owner[j]), f"{node.path}: {arr[int(j)].as_py()} has no JSON "
                                          "number")
        text = pc.if_else(columns.mask(finite), arr.fill_null(0).cast(pa.string()),
                          pa.scalar("0", pa.string()))
    else:
        text = arr.fill_null(0).cast(pa.string())
    return pc.if_else(columns.mask(valid), text, pa.scalar("null", pa.string())) if n and \
        not valid.all() else text


# --------------------------------------------------------------------------- derived schemas

def schema_from_arrow(t: pa.DataType, record_name: str = "topLevelRecord",
                      namespace: str = "") -> str:
    """The JSON Schema (draft-07 text) for writing a struct column of Arrow type ``t``: an
    object with a property per field, ``required`` listing the fields that are not nullable,
    and ``"null"`` among a nullable field's types. ``title`` is the record's full name (what
    Confluent's RecordNameStrategy names the subject after). A type with no JSON Schema form
    that this codec reads back raises SchemaFormatError naming the field."""
    if not pa.types.is_struct(t):
        raise SchemaFormatError(f"a JSON Schema is derived from a struct column, not {t}")
    title = f"{namespace}.{record_name}" if namespace else record_name
    doc = {"$schema": "http://json-schema.org/draft-07/schema#", "title": title,
           **_json_of(t, "", False)}
    return json.dumps(doc, separators=(",", ":"))


def _json_of(t: pa.DataType, path: str, nullable: bool) -> dict:
    where = path or "$"
    if pa.types.is_struct(t):
        out: dict = {"type": "object", "properties": {
            f.name: _json_of(f.type, f"{path}.{f.name}" if path else f.name, f.nullable)
            for f in t}}
        required = [f.name for f in t if not f.nullable]
        if required:
            out["required"] = required
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        out = {"type": "array", "items": _json_of(t.value_type, f"{path}[]",
                                                  t.value_field.nullable)}
    elif pa.types.is_map(t):
        if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
            raise SchemaFormatError(
                f"field {where!r}: a map with {t.key_type} keys; JSON object keys are strings "
                "(cast the keys to string)")
        value = _json_of(t.item_type, f"{path}{{}}", t.item_field.nullable)
        kinds = value["type"] if isinstance(value["type"], list) else [value["type"]]
        if value.get("format") or {"object", "array"} & set(kinds):
            raise SchemaFormatError(
                f"field {where!r}: a map's values must be strings, numbers, integers or "
                f"booleans to be read back, not {t.item_type}; use an array of structs")
        out = {"type": "object", "additionalProperties": value}
    elif pa.types.is_date(t):
        out = {"type": "string", "format": "date"}
    elif pa.types.is_timestamp(t):
        # An instant (Spark's timestamp) has RFC 3339's date-time; a local date-time
        # (timestamp_ntz) has no offset, which date-time requires.
        out = {"type": "string", "format": "date-time" if t.tz else "datetime-local"}
    elif pa.types.is_signed_integer(t) or t in (pa.uint8(), pa.uint16(), pa.uint32()):
        out = {"type": "integer"}
    elif pa.types.is_floating(t):
        out = {"type": "number"}
    elif pa.types.is_boolean(t):
        out = {"type": "boolean"}
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        out = {"type": "string"}
    else:
        hint = ""
        if pa.types.is_decimal(t):
            hint = "; cast it to a double or a string"
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
            hint = "; encode it as a string (base64() or hex())"
        raise SchemaFormatError(
            f"field {where!r}: the type {t} has no JSON Schema type txkafka derives{hint}")
    if nullable:
        out["type"] = [out["type"], "null"]
    return out
