"""The Avro codec against fastavro, an independent Avro implementation: fastavro writes, the
codec decodes to what Spark's from_avro shows; the codec encodes, fastavro's bytes come out
(Avro's binary encoding is deterministic). Random schemas and values, then the corners: blocks
with negative counts, corrupt data, schema resolution."""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import uuid
from decimal import Decimal, localcontext
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from txkafka.connector.errors import AvroSchemaError
from txkafka.connector.serde import avro
from txkafka.devtools.bench_avro import FLAT, NESTED, flat_values, nested_values

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------- helpers

def write(schema: Any, records: list[Any]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for r in records:
        b = io.BytesIO()
        fastavro.schemaless_writer(b, parsed, r)
        out.append(b.getvalue())
    return out


def read(schema: Any, payload: bytes, reader: Any = None) -> Any:
    parsed = fastavro.parse_schema(schema)
    return fastavro.schemaless_reader(io.BytesIO(payload), parsed,
                                      None if reader is None else fastavro.parse_schema(reader))


def decode(schema: Any, payloads: list[bytes | None], reader: Any = None) -> avro.DecodeResult:
    c = avro.codec(json.dumps(schema), None if reader is None else json.dumps(reader))
    return c.decode(pa.array(payloads, pa.binary()))


def _named(schema: Any, names: dict[str, Any]) -> Any:
    if isinstance(schema, dict) and "name" in schema and schema.get("type") in (
            "record", "enum", "fixed"):
        names[schema["name"]] = schema
    if isinstance(schema, str) and schema in names:
        return names[schema]
    return schema


def _kind(schema: Any, names: dict[str, Any]) -> str:
    schema = _named(schema, names)
    t = schema["type"] if isinstance(schema, dict) else schema
    return t if isinstance(t, str) else "?"


# --------------------------------------------------------------------------- random schemas

PRIMS = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
LOGICAL = [
    {"type": "int", "logicalType": "date"},
    {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "long", "logicalType": "local-timestamp-millis"},
    {"type": "long", "logicalType": "local-timestamp-micros"},
    {"type": "int", "logicalType": "time-millis"},
    {"type": "long", "logicalType": "time-micros"},
    {"type": "string", "logicalType": "uuid"},
    {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4},
]


class Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.n = 0

    def name(self) -> str:
        self.n += 1
        return f"T{self.n}"

    def schema(self, depth: int = 0) -> Any:
        r = self.r
        roll = r.random()
        if depth > 2 or roll < 0.45:
            return r.choice(PRIMS[1:] + LOGICAL)
        if roll < 0.55:
            return {"type": "enum", "name": self.name(), "symbols": ["A", "B", "C", "D"][:r.randint(1, 4)]}
        if roll < 0.6:
            size = r.choice([1, 4, 16])
            if r.random() < 0.5 and size >= 4:
                return {"type": "fixed", "name": self.name(), "size": size,
                        "logicalType": "decimal", "precision": 9 if size == 4 else 30, "scale": 2}
            return {"type": "fixed", "name": self.name(), "size": size}
        if roll < 0.7:
            return {"type": "array", "items": self.schema(depth + 1)}
        if roll < 0.78:
            return {"type": "map", "values": self.schema(depth + 1)}
        if roll < 0.9:
            inner = self.schema(depth + 1)
            if isinstance(inner, list):
                return inner
            return ["null", inner] if r.random() < 0.6 else [inner, "null"]
        if roll < 0.95:
            opts = r.sample(["int", "string", "double", "boolean", "bytes"], r.randint(2, 3))
            return (["null"] if r.random() < 0.5 else []) + opts
        return self.record(depth + 1)

    def record(self, depth: int = 0) -> dict:
        return {"type": "record", "name": self.name(),
                "fields": [{"name": f"f{i}", "type": self.schema(depth)}
                           for i in range(self.r.randint(1 if depth else 3, 5))]}

    def value(self, schema: Any, names: dict[str, Any]) -> Any:
        r = self.r
        schema = _named(schema, names)
        if isinstance(schema, list):
            nn = [b for b in schema if b != "null"]
            if "null" in schema and r.random() < 0.3:
                return None
            i = r.randrange(len(nn))
            return (f"#{i}", self.value(nn[i], names))
        t = schema["type"] if isinstance(schema, dict) else schema
        lt = schema.get("logicalType") if isinstance(schema, dict) else None
        if lt == "date":
            return dt.date(1970, 1, 1) + dt.timedelta(days=r.randint(-30000, 30000))
        if lt in ("timestamp-millis", "local-timestamp-millis"):
            v = EPOCH + dt.timedelta(milliseconds=r.randint(-2**40, 2**42))
            return v if lt.startswith("timestamp") else v.replace(tzinfo=None)
        if lt in ("timestamp-micros", "local-timestamp-micros"):
            v = EPOCH + dt.timedelta(microseconds=r.randint(-2**50, 2**52))
            return v if lt.startswith("timestamp") else v.replace(tzinfo=None)
        if lt == "time-millis":
            return r.randint(0, 86_400_000 - 1)
        if lt == "time-micros":
            return r.randint(0, 86_400_000_000 - 1)
        if lt == "uuid":
            return str(uuid.UUID(int=r.getrandbits(128)))
        if lt == "decimal":
            digits = schema["precision"]
            return Decimal(r.randint(-10**digits + 1, 10**digits - 1)).scaleb(-schema["scale"])
        if t == "null":
            return None
        if t == "boolean":
            return r.random() < 0.5
        if t == "int":
            return r.choice([0, -1, 1, 63, -64, 64, 2**31 - 1, -2**31, r.randint(-2**31, 2**31 - 1)])
        if t == "long":
            return r.choice([0, -1, 2**63 - 1, -2**63, 2**56, -2**56 - 1, r.randint(-2**63, 2**63 - 1),
                             r.randint(-1000, 1000)])
        if t == "float":
            return float(np.float32(r.uniform(-1e6, 1e6)))
        if t == "double":
            return r.choice([0.0, -0.0, 1e308, r.uniform(-1e9, 1e9), float("inf")])
        if t == "bytes":
            return bytes(r.getrandbits(8) for _ in range(r.choice([0, 1, 5, 13, 40])))
        if t == "string":
            return "".join(r.choice("aé€😀Z ") for _ in range(r.choice([0, 1, 7, 12, 30])))
        if t == "enum":
            return r.choice(schema["symbols"])
        if t == "fixed":
            return bytes(r.getrandbits(8) for _ in range(schema["size"]))
        if t == "array":
            return [self.value(schema["items"], names) for _ in range(r.choice([0, 0, 1, 3, 7]))]
        if t == "map":
            return {f"k{i}": self.value(schema["values"], names) for i in range(r.choice([0, 1, 4]))}
        if t == "record":
            return {f["name"]: self.value(f["type"], names) for f in schema["fields"]}
        raise AssertionError(t)


def convert(schema: Any, v: Any, names: dict[str, Any], spark: bool) -> Any:
    """A generated (union-tagged) value as fastavro's input (``spark`` False: a union's value
    as itself, fastavro picks the branch by type), or as Spark's from_avro shows it (maps as
    (key, value) lists, unions other than [null, T], [int, long], [float, double] as
    member0..N structs)."""
    schema = _named(schema, names)
    if isinstance(schema, list):
        if v is None:
            return None
        nn = [b for b in schema if b != "null"]
        i = int(v[0][1:])
        inner = convert(nn[i], v[1], names, spark)
        kinds = sorted(_kind(b, names) for b in nn)
        if not spark or len(nn) == 1 or kinds in (["int", "long"], ["double", "float"]):
            return inner
        return {f"member{j}": (inner if j == i else None) for j in range(len(nn))}
    t = schema["type"] if isinstance(schema, dict) else schema
    if t == "array":
        return [convert(schema["items"], x, names, spark) for x in v]
    if t == "map":
        items = [(k, convert(schema["values"], x, names, spark)) for k, x in v.items()]
        return items if spark else dict(items)
    if t == "record":
        return {f["name"]: convert(f["type"], v[f["name"]], names, spark)
                for f in schema["fields"]}
    return v


def _ambiguous(schema: Any, names: dict[str, Any]) -> bool:
    """Unions fastavro cannot write unambiguously from a plain value (int vs boolean, bytes vs
    string, double vs int): skipped by the generator's schemas below."""
    schema = _named(schema, names)
    if isinstance(schema, list):
        kinds = [_kind(b, names) for b in schema]
        if len(set(kinds)) != len(kinds):
            return True
        clash = [{"int", "boolean"}, {"double", "int"}, {"bytes", "string"}, {"bytes", "fixed"},
                 {"double", "float"}, {"int", "long"}, {"long", "boolean"}]
        if any(c <= set(kinds) for c in clash):
            return True
        return any(_ambiguous(b, names) for b in schema)
    if isinstance(schema, dict):
        t = schema["type"]
        if t == "array":
            return _ambiguous(schema["items"], names)
        if t == "map":
            return _ambiguous(schema["values"], names)
        if t == "record":
            return any(_ambiguous(f["type"], names) for f in schema["fields"])
    return False


def normalize(v: Any) -> Any:
    """Compare floats bit-exact via repr, timestamps as UTC instants, nested the same."""
    if isinstance(v, dict):
        return {k: normalize(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [normalize(x) for x in v]
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return ("ts", v.astimezone(UTC).replace(tzinfo=None))
    if isinstance(v, float):
        return repr(v)
    return v


# --------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("seed", range(40))
def test_random_schemas_decode_like_fastavro_and_encode_its_bytes(seed: int) -> None:
    g = Gen(seed)
    for _ in range(20):
        schema = g.record()
        if not _ambiguous(schema, {}):
            break
    else:
        pytest.skip("no unambiguous schema drawn")  # never happens for these seeds
    names: dict[str, Any] = {}
    fastavro.parse_schema(schema)
    values = [g.value(schema, names) for _ in range(60)]
    payloads = write(schema, [convert(schema, v, dict(names), False) for v in values])
    res = decode(schema, payloads)
    assert res.errors == {}
    assert res.values.type == avro.arrow_type(json.dumps(schema))
    got = res.values.to_pylist()
    want = [convert(schema, v, dict(names), True) for v in values]
    assert normalize(got) == normalize(want)
    enc = avro.codec(json.dumps(schema)).encode(res.values)
    assert enc.errors == {}
    assert enc.payloads.to_pylist() == payloads


def flat_records(n: int, seed: int = 1) -> list[dict]:
    """Records of the benchmark's flat schema, big and negative numbers included."""
    r = random.Random(seed)
    return [{"id": r.randint(-2**63, 2**63 - 1), "n": r.randint(-2**31, 2**31 - 1),
             "x": r.uniform(-1e9, 1e9), "s": "é" * r.randint(0, 20), "ok": r.random() < 0.5,
             "note": None if r.random() < 0.5 else "n%d" % i, "kind": r.choice("ABC"),
             "at": EPOCH + dt.timedelta(milliseconds=r.randint(-2**41, 2**41)),
             "score": float(np.float32(r.uniform(-10, 10))), "seq": i - 5}
            for i in range(n)]


def test_flat_record_round_trip_and_types() -> None:
    recs = flat_records(500)
    payloads = write(FLAT, recs)
    c = avro.codec(json.dumps(FLAT))
    assert c.arrow_type == pa.struct([
        pa.field("id", pa.int64(), False), pa.field("n", pa.int32(), False),
        pa.field("x", pa.float64(), False), pa.field("s", pa.string(), False),
        pa.field("ok", pa.bool_(), False), pa.field("note", pa.string(), True),
        pa.field("kind", pa.string(), False),
        pa.field("at", pa.timestamp("us", tz="UTC"), False),
        pa.field("score", pa.float32(), False), pa.field("seq", pa.int64(), False)])
    res = c.decode(pa.array(payloads, pa.binary()))
    assert res.errors == {}
    assert normalize(res.values.to_pylist()) == normalize(recs)
    enc = c.encode(res.values)
    assert enc.errors == {} and enc.payloads.to_pylist() == payloads
    # A slice of the column (an offset) encodes the same bytes.
    enc = c.encode(res.values.slice(7, 100))
    assert enc.payloads.to_pylist() == payloads[7:107]


def test_null_payloads_are_null_values_and_null_values_null_payloads() -> None:
    payloads = write(FLAT, flat_records(3))
    res = decode(FLAT, [payloads[0], None, payloads[2]])
    assert res.errors == {} and res.values.to_pylist()[1] is None
    assert res.values.to_pylist()[2]["id"] == flat_records(3)[2]["id"]
    enc = avro.codec(json.dumps(FLAT)).encode(res.values)
    assert enc.errors == {} and enc.payloads.to_pylist() == [payloads[0], None, payloads[2]]


def test_nested_records_arrays_of_records_maps() -> None:
    schema = {"type": "record", "name": "Order", "fields": [
        {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
            {"name": "name", "type": "string"},
            {"name": "address", "type": ["null", {"type": "record", "name": "Address",
                                                  "fields": [{"name": "city", "type": "string"}]}]}]}},
        {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line",
            "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"},
                       {"name": "tags", "type": {"type": "map", "values": "string"}}]}}},
        {"name": "again", "type": "Customer"},
    ]}
    recs = [{"customer": {"name": "ann", "address": {"city": "Oslo"}},
             "lines": [{"sku": "a", "qty": 1, "tags": {}}, {"sku": "b", "qty": -5,
                                                          "tags": {"x": "1", "y": "2"}}],
             "again": {"name": "b", "address": None}},
            {"customer": {"name": "", "address": None}, "lines": [],
             "again": {"name": "c", "address": {"city": ""}}}]
    payloads = write(schema, recs)
    res = decode(schema, payloads)
    assert res.errors == {}
    got = res.values.to_pylist()
    assert got[0]["lines"][1]["tags"] == [("x", "1"), ("y", "2")]
    assert got[1]["lines"] == [] and got[0]["customer"]["address"] == {"city": "Oslo"}
    assert got[1]["again"]["address"] == {"city": ""}
    assert avro.codec(json.dumps(schema)).encode(res.values).payloads.to_pylist() == payloads


def test_union_mappings_as_spark() -> None:
    cases = [
        (["null", "long"], pa.int64()),
        (["long", "null"], pa.int64()),
        (["int", "long"], pa.int64()),
        (["null", "float", "double"], pa.float64()),
        (["int", "string"], pa.struct([pa.field("member0", pa.int32()),
                                       pa.field("member1", pa.string())])),
        (["null", "int", "string"], pa.struct([pa.field("member0", pa.int32()),
                                               pa.field("member1", pa.string())])),
        ("null", pa.null()),
    ]
    for schema, t in cases:
        assert avro.arrow_type(json.dumps(schema)) == t
    res = decode(["int", "long"], write(["int", "long"], [1, 2**40]))
    assert res.values.to_pylist() == [1, 2**40]
    assert avro.codec('["int","long"]').encode(res.values).payloads.to_pylist() == \
        write(["int", "long"], [("long", 1), 2**40])  # a 64-bit column writes the long branch


def test_logical_types_map_as_spark() -> None:
    cases = {
        '{"type":"int","logicalType":"date"}': pa.date32(),
        '{"type":"long","logicalType":"timestamp-millis"}': pa.timestamp("us", tz="UTC"),
        '{"type":"long","logicalType":"timestamp-micros"}': pa.timestamp("us", tz="UTC"),
        '{"type":"long","logicalType":"local-timestamp-millis"}': pa.timestamp("us"),
        '{"type":"long","logicalType":"local-timestamp-micros"}': pa.timestamp("us"),
        '{"type":"int","logicalType":"time-millis"}': pa.int32(),
        '{"type":"long","logicalType":"time-micros"}': pa.int64(),
        '{"type":"string","logicalType":"uuid"}': pa.string(),
        '{"type":"bytes","logicalType":"decimal","precision":5,"scale":2}': pa.decimal128(5, 2),
        '{"type":"fixed","name":"d","size":3,"logicalType":"decimal","precision":6,"scale":1}':
            pa.decimal128(6, 1),
        # more digits than 3 bytes hold: Avro ignores the logical type
        '{"type":"fixed","name":"d","size":3,"logicalType":"decimal","precision":9}': pa.binary(),
        '{"type":"bytes","logicalType":"decimal","precision":0}': pa.binary(),
        '{"type":"enum","name":"e","symbols":["A"]}': pa.string(),
        '{"type":"map","values":"int"}': pa.map_(pa.string(), pa.field("value", pa.int32(), False)),
    }
    for schema, t in cases.items():
        assert avro.arrow_type(schema) == t, schema


def test_decimals_bytes_and_fixed_both_ways() -> None:
    for schema in ({"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 3},
                   {"type": "fixed", "name": "D", "size": 16, "logicalType": "decimal",
                    "precision": 38, "scale": 3}):
        values = [Decimal(0), Decimal("-0.001"), Decimal("0.128"), Decimal("-0.128"),
                  Decimal("-0.129"), Decimal("255.000"), Decimal("-256.000"),
                  Decimal(10**35 - 1).scaleb(-3), Decimal(-10**35 + 1).scaleb(-3)]
        with localcontext() as ctx:
            ctx.prec = 50
            values = [v.quantize(Decimal("0.001")) for v in values]
        payloads = write(schema, values)
        res = decode(schema, payloads)
        assert res.errors == {} and res.values.to_pylist() == values
        if schema["type"] == "bytes":
            # Minimal two's complement, as Avro's Java writer (BigInteger): fastavro gives
            # -128 two bytes (ff 80) where one (80) holds it.
            payloads[3] = bytes([0x02, 0x80])
        assert avro.codec(json.dumps(schema)).encode(res.values).payloads.to_pylist() == payloads


def test_decimal_wider_than_schema_is_an_error_row() -> None:
    schema = {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}
    col = pa.array([Decimal("99.99"), Decimal("100.00"), Decimal("-100.00")], pa.decimal128(10, 2))
    enc = avro.codec(json.dumps(schema)).encode(col)
    assert set(enc.errors) == {1, 2} and "4 digits" in enc.errors[1]
    assert enc.payloads.to_pylist()[0] == write(schema, [Decimal("99.99")])[0]


def test_big_and_negative_numbers_and_unicode() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "l", "type": "long"}, {"name": "i", "type": "int"},
        {"name": "s", "type": "string"}, {"name": "b", "type": "bytes"}]}
    recs = [{"l": v, "i": i, "s": s, "b": s.encode()} for v, i, s in [
        (2**63 - 1, 2**31 - 1, "😀" * 100), (-2**63, -2**31, ""), (2**62, -1, "a\x00b"),
        (-(2**56), 0, "漢字"), (127, 64, "x" * 5000)]]
    payloads = write(schema, recs)
    res = decode(schema, payloads)
    assert res.errors == {} and res.values.to_pylist() == recs
    assert avro.codec(json.dumps(schema)).encode(res.values).payloads.to_pylist() == payloads


def test_empty_and_negative_count_blocks() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": {"type": "array", "items": "long"}},
        {"name": "m", "type": {"type": "map", "values": "string"}}]}
    # a: two blocks, the first with a negative count (-2) and its byte size (2), then 1 item;
    # m: a block of -1 with its size, then the end.
    payload = bytes([0x03, 0x04, 0x02, 0x04, 0x02, 0x06, 0x00,
                     0x01, 0x08, 0x02, ord("k"), 0x04, ord("v"), ord("w"), 0x00])
    empty = bytes([0x00, 0x00])
    assert read(schema, payload) == {"a": [1, 2, 3], "m": {"k": "vw"}}
    res = decode(schema, [payload, empty, payload])
    assert res.errors == {}
    assert res.values.to_pylist() == [{"a": [1, 2, 3], "m": [("k", "vw")]},
                                      {"a": [], "m": []}, {"a": [1, 2, 3], "m": [("k", "vw")]}]


def test_arrays_of_varied_lengths_keep_order() -> None:
    schema = {"type": "array", "items": ["null", "string"]}
    r = random.Random(5)
    values = [[None if r.random() < 0.2 else str(r.random()) for _ in range(r.randint(0, 30))]
              for _ in range(300)]
    payloads = write(schema, values)
    res = decode(schema, payloads)
    assert res.errors == {} and res.values.to_pylist() == values
    assert avro.codec(json.dumps(schema)).encode(res.values).payloads.to_pylist() == payloads


def test_non_record_top_level_schemas() -> None:
    for schema, values in [("string", ["a", "", "ü"]), ("long", [1, -1, 2**40]),
                           (["null", "double"], [None, 1.5]), ("boolean", [True, False]),
                           ({"type": "enum", "name": "E", "symbols": ["X", "Y"]}, ["Y", "X"])]:
        payloads = write(schema, values)
        res = decode(schema, payloads)
        assert res.errors == {} and res.values.to_pylist() == values
        # A null value is a null payload (a tombstone), as Spark's to_avro gives null for null.
        assert avro.codec(json.dumps(schema)).encode(res.values).payloads.to_pylist() == [
            None if v is None else p for v, p in zip(values, payloads)]


# --------------------------------------------------------------------------- bad input

def test_corrupt_payloads_are_error_rows_with_messages() -> None:
    good = write(FLAT, flat_records(4))
    truncated = good[1][:len(good[1]) - 3]
    trailing = good[2] + b"\x00"
    cut_string = good[0][:20]
    res = decode(FLAT, [good[0], truncated, trailing, cut_string, good[3], b"",
                        bytes([0xFF] * 12)])
    assert set(res.errors) == {1, 2, 3, 5, 6}
    assert "bytes are left" in res.errors[2]
    assert all(res.values.to_pylist()[i] is None for i in res.errors)
    assert res.values.to_pylist()[4]["id"] == flat_records(4)[3]["id"]
    assert "varint" in res.errors[6] or "past" in res.errors[6]


def test_bad_union_index_enum_index_utf8_and_boolean() -> None:
    cases = [
        (["null", "string"], bytes([0x04]), "ok", "union branch index"),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, bytes([0x02]), "A", "enum index"),
        ("string", bytes([0x04, 0xC3, 0x28]), "ok", "UTF-8"),
        ("boolean", bytes([0x02]), True, "boolean"),
        ("int", bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x7F]), 3, "32 bits"),
        ("long", bytes([0xFF] * 10 + [0x01]), 3, "10 bytes"),
        ({"type": "array", "items": "long"}, bytes([0x7E, 0x00]), [1], "more items"),
        ("string", bytes([0x03]), "ok", "negative"),
    ]
    for schema, payload, good, message in cases:
        res = decode(schema, [payload] + write(schema, [good]))
        assert list(res.errors) == [0], (schema, res.errors)
        assert message in res.errors[0], (schema, res.errors)
        assert res.values.to_pylist() == [None, good]


def test_encode_errors_are_rows() -> None:
    c = avro.codec(json.dumps(FLAT))
    col = c.decode(pa.array(write(FLAT, flat_records(3)), pa.binary())).values
    kinds = col.field("kind").to_pylist()
    kinds[1] = "Q"
    ids = col.field("id").to_pylist()
    ids[2] = None
    col = pa.StructArray.from_arrays([pa.array(ids, pa.int64()) if f.name == "id" else
                                      pa.array(kinds) if f.name == "kind" else col.field(f.name)
                                      for f in col.type], names=[f.name for f in col.type])
    enc = c.encode(col)
    assert set(enc.errors) == {1, 2}
    assert "not a symbol" in enc.errors[1] and "null" in enc.errors[2] and "id" in enc.errors[2]
    assert enc.payloads.to_pylist()[1:] == [None, None]
    assert enc.payloads.to_pylist()[0] == write(FLAT, flat_records(1))[0]


def test_schema_errors_are_clear() -> None:
    with pytest.raises(AvroSchemaError, match="not valid JSON"):
        avro.codec("{nope")
    with pytest.raises(AvroSchemaError, match="does not define"):
        avro.codec('{"type":"record","name":"R","fields":[{"name":"a","type":"Missing"}]}')
    with pytest.raises(AvroSchemaError, match="recursive"):
        avro.codec('{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}')
    with pytest.raises(AvroSchemaError, match="missing from the column: n, x, s"):
        avro.codec(json.dumps(FLAT)).encode(pa.array([{"id": 1}]))


# --------------------------------------------------------------------------- resolution

def test_resolution_added_removed_promoted_and_enum_default() -> None:
    writer = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"}, {"name": "gone", "type": {"type": "array", "items": "string"}},
        {"name": "f", "type": "float"}, {"name": "s", "type": "string"},
        {"name": "old", "type": "long"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "NEW"]}}]}
    reader = {"type": "record", "name": "R", "fields": [
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["B", "A", "OTHER"],
                               "default": "OTHER"}},
        {"name": "a", "type": "long"}, {"name": "f", "type": "double"},
        {"name": "s", "type": "bytes"},
        {"name": "renamed", "aliases": ["old"], "type": "double"},
        {"name": "added", "type": "string", "default": "dflt"},
        {"name": "added_null", "type": ["null", "int"], "default": None},
        {"name": "added_rec", "type": {"type": "record", "name": "S", "fields": [
            {"name": "x", "type": "int"}]}, "default": {"x": 7}}]}
    recs = [{"a": 1, "gone": ["x", "y"], "f": 1.5, "s": "é", "old": 2**40, "e": "NEW"},
            {"a": -3, "gone": [], "f": -2.25, "s": "", "old": -1, "e": "A"}]
    payloads = write(writer, recs)
    res = decode(writer, payloads, reader)
    assert res.errors == {}
    assert res.values.type == avro.arrow_type(json.dumps(reader))
    got = res.values.to_pylist()
    want = [read(writer, p, reader) for p in payloads]
    for g, w in zip(got, want):
        assert g == w
    assert got[0]["e"] == "OTHER" and got[0]["added_rec"] == {"x": 7}


def test_resolution_enum_without_default_is_an_error_row() -> None:
    writer = {"type": "enum", "name": "E", "symbols": ["A", "B"]}
    reader = {"type": "enum", "name": "E", "symbols": ["A"]}
    res = decode(writer, write(writer, ["A", "B"]), reader)
    assert list(res.errors) == [1] and "'B'" in res.errors[1]
    assert res.values.to_pylist() == ["A", None]


def test_resolution_unions() -> None:
    # Reordered branches, a writer union read as a non-union, a non-union read as a union.
    w = ["null", "int", "string"]
    r = ["string", "long", "null"]
    payloads = write(w, [None, 5, "x"])
    res = decode(w, payloads, r)
    assert res.errors == {}
    assert res.values.to_pylist() == [None, {"member0": None, "member1": 5},
                                      {"member0": "x", "member1": None}]
    res = decode(["int", "string"], write(["int", "string"], [4, "s"]), "long")
    assert list(res.errors) == [1] and res.values.to_pylist() == [4, None]
    res = decode("int", write("int", [9]), ["null", "double"])
    assert res.errors == {} and res.values.to_pylist() == [9.0]
    with pytest.raises(AvroSchemaError, match="no default"):
        avro.codec('{"type":"record","name":"R","fields":[]}',
                   '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}')
    with pytest.raises(AvroSchemaError, match="cannot be read"):
        avro.codec('"string"', '"int"')


# --------------------------------------------------------------------------- Arrow -> Avro

def test_schema_from_arrow_as_spark_with_null_first() -> None:
    t = pa.struct([
        pa.field("id", pa.int64(), False), pa.field("name", pa.string()),
        pa.field("price", pa.decimal128(10, 2)), pa.field("day", pa.date32()),
        pa.field("at", pa.timestamp("us", tz="UTC")), pa.field("local", pa.timestamp("us")),
        pa.field("tags", pa.list_(pa.field("element", pa.string(), False))),
        pa.field("attrs", pa.map_(pa.string(), pa.int32())),
        pa.field("inner", pa.struct([pa.field("x", pa.float32(), False)]), False),
        pa.field("b", pa.binary()), pa.field("small", pa.int16())])
    text = avro.schema_from_arrow(t)
    s = json.loads(text)
    assert s["name"] == "topLevelRecord" and "namespace" not in s
    fields = {f["name"]: f for f in s["fields"]}
    assert fields["id"]["type"] == "long" and "default" not in fields["id"]
    assert fields["name"] == {"name": "name", "type": ["null", "string"], "default": None}
    assert fields["price"]["type"][1] == {"type": "fixed", "name": "fixed",
                                          "namespace": "topLevelRecord.price", "size": 5,
                                          "logicalType": "decimal", "precision": 10, "scale": 2}
    assert fields["inner"]["type"] == {"type": "record", "name": "inner",
                                       "namespace": "topLevelRecord",
                                       "fields": [{"name": "x", "type": "float"}]}
    assert fields["at"]["type"][1]["logicalType"] == "timestamp-micros"
    assert fields["local"]["type"][1]["logicalType"] == "local-timestamp-micros"
    assert fields["small"]["type"] == ["null", "int"]
    fastavro.parse_schema(s)
    # Round trip: Arrow -> Avro schema -> the Arrow type back (int16 reads back as int32).
    back = avro.arrow_type(text)
    assert back.field("price").type == pa.decimal128(10, 2)
    assert back.field("tags").type == t.field("tags").type
    # A nullable field added later resolves for old data (BACKWARD): null by default.
    old = avro.schema_from_arrow(pa.struct([pa.field("id", pa.int64(), False)]))
    new = avro.schema_from_arrow(pa.struct([pa.field("id", pa.int64(), False),
                                            pa.field("more", pa.string())]))
    payload = avro.codec(old).encode(pa.array([{"id": 3}], avro.arrow_type(old))).payloads
    res = avro.codec(old, new).decode(payload)
    assert res.values.to_pylist() == [{"id": 3, "more": None}]


def test_timestamp_ntz_round_trips_through_local_timestamp() -> None:
    """timestamp_ntz is derived as local-timestamp-micros (Avro's date-time without a zone) and
    reads back as timestamp_ntz, its wall-clock time unchanged; timestamp stays an instant.
    fastavro reads the local one as a naive datetime, the instant as an aware one."""
    t = pa.struct([pa.field("local", pa.timestamp("us")),
                   pa.field("at", pa.timestamp("us", "UTC"))])
    text = avro.schema_from_arrow(t, "Item", "shop")
    codec = avro.codec(text)
    assert codec.arrow_type == t
    from pyspark.sql.pandas.types import from_arrow_type

    assert from_arrow_type(codec.arrow_type).simpleString() == (
        "struct<local:timestamp_ntz,at:timestamp>")
    wall = dt.datetime(2024, 3, 31, 2, 30, 0, 123456)  # a wall-clock time DST skips in Europe
    values = pa.array([{"local": wall, "at": wall.replace(tzinfo=UTC)},
                       {"local": dt.datetime(1, 1, 1), "at": None}], t)
    enc = codec.encode(values)
    assert enc.errors == {}
    assert codec.decode(enc.payloads).values == values
    assert [read(json.loads(text), p) for p in enc.payloads.to_pylist()] == [
        {"local": wall, "at": wall.replace(tzinfo=UTC)},
        {"local": dt.datetime(1, 1, 1), "at": None}]
    # local-timestamp-millis (what other writers may register) reads as timestamp_ntz too.
    millis = {"type": "record", "name": "R", "fields": [
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}}]}
    res = decode(millis, write(millis, [{"local": dt.datetime(2024, 3, 31, 2, 30, 0, 123000)}]))
    assert res.values.type.field("local").type == pa.timestamp("us")
    assert res.values.to_pylist() == [{"local": dt.datetime(2024, 3, 31, 2, 30, 0, 123000)}]


def test_encode_from_spark_shaped_arrow() -> None:
    """Columns as Spark hands them (int16, large strings, timestamps of another unit)."""
    t = pa.struct([pa.field("small", pa.int16(), False), pa.field("s", pa.large_string(), False),
                   pa.field("at", pa.timestamp("ns", tz="UTC"), False)])
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "small", "type": "int"}, {"name": "s", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    col = pa.array([{"small": -7, "s": "hi", "at": 1_500_000_999}], t)
    enc = avro.codec(json.dumps(schema)).encode(col)
    assert enc.errors == {}
    assert read(schema, enc.payloads[0].as_py()) == {
        "small": -7, "s": "hi", "at": EPOCH + dt.timedelta(milliseconds=1500)}


# --------------------------------------------------------------------------- more corners

def test_benchmark_columns_encode_fastavro_s_bytes_and_decode_back() -> None:
    for schema, values in ((FLAT, flat_values(3000)), (NESTED, nested_values(3000))):
        c = avro.codec(json.dumps(schema))
        enc = c.encode(values)
        assert enc.errors == {}
        raw = enc.payloads.to_pylist()
        for p in raw[::97]:
            assert write(schema, [read(schema, p)]) == [p]
        res = c.decode(enc.payloads)
        assert res.errors == {} and res.values.equals(values)


def test_resolution_inside_arrays_maps_and_nullable_records() -> None:
    writer = {"type": "record", "name": "R", "fields": [
        {"name": "xs", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": {"type": "record", "name": "V", "fields": [
            {"name": "a", "type": "string"}]}}},
        {"name": "opt", "type": ["null", "V"]}]}
    reader = {"type": "record", "name": "R", "fields": [
        {"name": "xs", "type": {"type": "array", "items": "double"}},
        {"name": "m", "type": {"type": "map", "values": {"type": "record", "name": "V", "fields": [
            {"name": "a", "type": "bytes"}, {"name": "b", "type": "long", "default": -1}]}}},
        {"name": "opt", "type": ["null", "V"]}]}
    recs = [{"xs": [1, -2, 2**31 - 1], "m": {"k": {"a": "é"}}, "opt": {"a": "z"}},
            {"xs": [], "m": {}, "opt": None}]
    payloads = write(writer, recs)
    res = decode(writer, payloads, reader)
    assert res.errors == {}
    assert res.values.to_pylist() == [
        {"xs": [1.0, -2.0, 2147483647.0], "m": [("k", {"a": "é".encode(), "b": -1})],
         "opt": {"a": b"z", "b": -1}},
        {"xs": [], "m": [], "opt": None}]
    assert [read(writer, p, reader) for p in payloads][0]["m"]["k"] == {"a": "é".encode(), "b": -1}


def test_truncated_inside_an_array_is_one_bad_row() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "L",
                                                              "fields": [{"name": "s", "type": "string"}]}}}]}
    good = write(schema, [{"lines": [{"s": "abc"}, {"s": "de"}]}] * 3)
    cut = good[1][:5]
    res = decode(schema, [good[0], cut, good[2]])
    assert list(res.errors) == [1]
    assert res.values.to_pylist()[0] == res.values.to_pylist()[2] == {
        "lines": [{"s": "abc"}, {"s": "de"}]}


def test_encode_null_inside_an_array_names_the_field() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "L",
                                                              "fields": [{"name": "q", "type": "int"}]}}}]}
    t = avro.arrow_type(json.dumps(schema))
    col = pa.array([{"lines": [{"q": 1}]}, {"lines": [{"q": 2}, {"q": None}]}, {"lines": []}],
                   pa.struct([pa.field("lines", pa.list_(pa.struct([pa.field("q", pa.int32())])))]))
    enc = avro.codec(json.dumps(schema)).encode(col)
    assert list(enc.errors) == [1] and "lines[].q" in enc.errors[1]
    assert enc.payloads.to_pylist() == [write(schema, [{"lines": [{"q": 1}]}])[0], None,
                                        write(schema, [{"lines": []}])[0]]
    assert t.field("lines").type.value_type.field("q").nullable is False


def test_int_column_beyond_32_bits_and_narrow_union_branch() -> None:
    enc = avro.codec('"int"').encode(pa.array([1, 2**31, -2**31 - 1], pa.int64()))
    assert set(enc.errors) == {1, 2} and "32 bits" in enc.errors[1]
    # A 32-bit column writes the int branch of ["int", "long"].
    enc = avro.codec('["int","long"]').encode(pa.array([5], pa.int32()))
    assert enc.payloads.to_pylist() == write(["int", "long"], [5])


def test_fixed_decimals_of_three_bytes() -> None:
    schema = {"type": "fixed", "name": "D", "size": 3, "logicalType": "decimal",
              "precision": 6, "scale": 1}
    values = [Decimal("-0.1"), Decimal("99999.9"), Decimal("-99999.9"), Decimal("0.0"),
              Decimal("-12.8")]
    payloads = write(schema, values)
    res = decode(schema, payloads)
    assert res.errors == {} and res.values.to_pylist() == values
    assert avro.codec(json.dumps(schema)).encode(res.values).payloads.to_pylist() == payloads


def test_map_blocks_with_negative_counts_of_records() -> None:
    schema = {"type": "map", "values": {"type": "record", "name": "P", "fields": [
        {"name": "x", "type": "int"}, {"name": "y", "type": ["null", "string"]}]}}
    entry_a = bytes([0x02, ord("a"), 0x04, 0x02, 0x02, ord("q")])  # "a": {x: 2, y: "q"}
    entry_b = bytes([0x02, ord("b"), 0x7F, 0x00])                  # "b": {x: -64, y: null}
    payload = (bytes([0x01, len(entry_a) * 2]) + entry_a + bytes([0x01, len(entry_b) * 2])
               + entry_b + bytes([0x00]))
    assert read(schema, payload) == {"a": {"x": 2, "y": "q"}, "b": {"x": -64, "y": None}}
    res = decode(schema, [payload, bytes([0x00])])
    assert res.errors == {}
    assert res.values.to_pylist() == [[("a", {"x": 2, "y": "q"}), ("b", {"x": -64, "y": None})],
                                      []]


def test_named_type_references_and_namespaces() -> None:
    schema = {"type": "record", "name": "Outer", "namespace": "a.b", "fields": [
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "e2", "type": "a.b.Color"},
        {"name": "inner", "type": {"type": "record", "name": "In", "namespace": "c",
                                   "fields": [{"name": "f", "type": {"type": "fixed",
                                                                     "name": "F", "size": 2}}]}},
        {"name": "f2", "type": "c.F"}]}
    recs = [{"e": "GREEN", "e2": "RED", "inner": {"f": b"\x00\xff"}, "f2": b"zz"}]
    payloads = write(schema, recs)
    res = decode(schema, payloads)
    assert res.errors == {} and res.values.to_pylist() == recs
    assert avro.codec(json.dumps(schema)).encode(res.values).payloads.to_pylist() == payloads


def test_long_arrays_of_varints_in_one_record() -> None:
    """Blocks of many varint items (read by scanning their bytes, not item by item), beside
    short ones, in several blocks, and one cut short."""
    schema = {"type": "array", "items": "long"}
    r = random.Random(3)
    values = [[r.randint(-2**63, 2**63 - 1) for _ in range(20_000)], [1, 2], [],
              [r.randint(-300, 300) for _ in range(500)]]
    payloads = write(schema, values)
    res = decode(schema, payloads)
    assert res.errors == {} and res.values.to_pylist() == values
    block = bytes([0x82, 0x01]) + bytes((2 * i) % 126 for i in range(65))  # 65 items
    two_blocks = block + bytes([0x81, 0x01, 0x82, 0x01]) + block[2:] + bytes([0x00])
    want = read(schema, two_blocks)  # the second block has a negative count and a size
    assert len(want) == 130
    res = decode(schema, [two_blocks, payloads[1]])
    assert res.errors == {} and res.values.to_pylist() == [want, [1, 2]]
    res = decode(schema, [payloads[0][:-50], payloads[1]])
    assert list(res.errors) == [0] and res.values.to_pylist()[1] == [1, 2]
    enum_schema = {"type": "array", "items": {"type": "enum", "name": "E", "symbols": ["A", "B"]}}
    many = [["A", "B"] * 100]
    res = decode(enum_schema, write(enum_schema, many))
    assert res.errors == {} and res.values.to_pylist() == many


def test_empty_sliced_chunked_and_large_binary_columns() -> None:
    c = avro.codec(json.dumps(NESTED))
    values = nested_values(40)
    assert len(c.encode(values.slice(0, 0)).payloads) == 0
    assert c.decode(pa.array([], pa.binary())).values.type == c.arrow_type
    enc = c.encode(values.slice(10, 20))
    assert c.decode(enc.payloads.slice(3, 5)).values.equals(values.slice(13, 5))
    assert c.decode(enc.payloads.cast(pa.large_binary())).values.equals(values.slice(10, 20))
    chunked = c.encode(pa.chunked_array([values.slice(0, 5), values.slice(5, 5)]))
    assert chunked.payloads.equals(c.encode(values.slice(0, 10)).payloads)


@pytest.mark.parametrize("seed", range(25))
def test_corrupted_payloads_never_raise_and_leave_other_rows_alone(seed: int) -> None:
    """Random schemas, payloads with bytes flipped, cut or appended: decoding never raises,
    the untouched rows decode as before, and a damaged row that is an error row is null."""
    g = Gen(1000 + seed)
    for _ in range(20):
        schema = g.record()
        if not _ambiguous(schema, {}):
            break
    names: dict[str, Any] = {}
    fastavro.parse_schema(schema)
    values = [g.value(schema, names) for _ in range(40)]
    payloads = write(schema, [convert(schema, v, dict(names), False) for v in values])
    clean = decode(schema, payloads).values
    r = random.Random(seed)
    damaged = list(payloads)
    hit = set(r.sample(range(len(payloads)), 15))
    for i in hit:
        p = bytearray(damaged[i])
        how = r.random()
        if how < 0.4 and p:
            for _ in range(r.randint(1, 3)):
                p[r.randrange(len(p))] = r.randrange(256)
        elif how < 0.7:
            p = p[:r.randrange(len(p) + 1)]
        else:
            p += bytes(r.randrange(256) for _ in range(r.randint(1, 20)))
        damaged[i] = bytes(p)
    res = decode(schema, damaged)
    got = res.values  # a damaged row may hold a date beyond Python's: compared in Arrow
    for i in range(len(payloads)):
        if i not in hit or damaged[i] == payloads[i]:
            assert i not in res.errors and got[i].equals(clean[i])
        elif i in res.errors:
            assert not got[i].is_valid and res.errors[i]


def evolve(schema: Any, r: random.Random, names: set[str], in_union: bool = False) -> Any:
    """A reader schema for data written with ``schema``: fields dropped, added with defaults,
    reordered, types promoted, values wrapped in a nullable union."""
    if isinstance(schema, dict) and schema.get("type") == "record":
        if schema["name"] in names:
            return schema["name"]
        names.add(schema["name"])
        fields = []
        for f in schema["fields"]:
            if r.random() < 0.15:
                continue  # dropped: the reader skips it
            fields.append(dict(f, type=evolve(f["type"], r, names)))
        if r.random() < 0.5:
            fields.append({"name": f"added{len(fields)}", "type": "string", "default": "dflt"})
        if r.random() < 0.3:
            fields.append({"name": f"opt{len(fields)}", "type": ["null", "long"],
                           "default": None})
        r.shuffle(fields)
        return dict(schema, fields=fields)
    if isinstance(schema, dict) and schema.get("type") == "array":
        return dict(schema, items=evolve(schema["items"], r, names))
    if isinstance(schema, dict) and schema.get("type") == "map":
        return dict(schema, values=evolve(schema["values"], r, names))
    if isinstance(schema, dict) and schema.get("type") in ("enum", "fixed"):
        names.add(schema["name"])
        return schema
    if isinstance(schema, list):
        return [evolve(b, r, names, True) for b in schema]
    promote = {"int": ["long", "double"], "long": ["double"], "float": ["double"],
               "string": ["bytes"]}
    if isinstance(schema, str) and schema in promote and r.random() < 0.5:
        return r.choice(promote[schema])
    if r.random() < 0.15 and schema != "null" and not in_union:
        return ["null", schema]
    return schema


@pytest.mark.parametrize("seed", range(30))
def test_random_schema_evolution_resolves_as_fastavro(seed: int) -> None:
    """Data written with a random schema, read with an evolved one: the codec's resolved
    column equals fastavro's resolved records (written again with the reader schema and
    decoded without resolution)."""
    g = Gen(5000 + seed)
    for _ in range(20):
        writer = g.record()
        if not _ambiguous(writer, {}):
            break
    r = random.Random(seed)
    reader = evolve(writer, r, set())
    if _ambiguous(reader, {}):
        pytest.skip("the evolved schema has a union fastavro cannot write unambiguously")
    names: dict[str, Any] = {}
    values = [g.value(writer, names) for _ in range(30)]
    payloads = write(writer, [convert(writer, v, dict(names), False) for v in values])
    res = decode(writer, payloads, reader)
    assert res.errors == {}
    resolved = [read(writer, p, reader) for p in payloads]
    want = decode(reader, write(reader, resolved))
    assert want.errors == {}
    assert res.values.equals(want.values)


def test_binary_column_written_as_string_must_be_utf8() -> None:
    enc = avro.codec('"string"').encode(pa.array([b"ok", b"\xc3\x28", "é".encode()], pa.binary()))
    assert list(enc.errors) == [1] and "UTF-8" in enc.errors[1]
    assert enc.payloads.to_pylist() == [write("string", ["ok"])[0], None, write("string", ["é"])[0]]


def test_big_columns_in_slices_keep_rows_and_errors_in_place() -> None:
    """Columns of many slices (decode and encode work a slice at a time): errors at the right
    rows, payloads as the rows encoded alone, the buffer grown when rows get longer."""
    c = avro.codec(json.dumps(FLAT))
    values = flat_values(60_000)
    ids = values.field("id").to_pylist()
    for i in (5, 4096, 30_001, 59_999):
        ids[i] = None
    s = values.field("s")
    longer = pa.array([x * (40 if i > 20_000 else 1) for i, x in enumerate(s.to_pylist())])
    cols = [pa.array(ids, pa.int64()) if f.name == "id" else longer if f.name == "s"
            else values.field(f.name) for f in values.type]
    values = pa.StructArray.from_arrays(cols, names=[f.name for f in values.type])
    enc = c.encode(values)
    assert sorted(enc.errors) == [5, 4096, 30_001, 59_999]
    for i in (0, 4095, 4097, 30_000, 59_998):
        assert enc.payloads[i].as_py() == c.encode(values.slice(i, 1)).payloads[0].as_py()
    assert all(enc.payloads[i].as_py() is None for i in enc.errors)
    payloads = enc.payloads.to_pylist()
    for i in (7, 33_333, 59_000):
        payloads[i] = payloads[i][:-1]
    res = c.decode(pa.array(payloads, pa.binary()))
    assert sorted(res.errors) == [7, 33_333, 59_000]  # the null payloads are null values
    assert all(not res.values[i].is_valid for i in [*res.errors, *enc.errors])
    ok = [i for i in range(0, 60_000, 997) if i not in res.errors and i not in enc.errors]
    assert normalize(res.values.take(pa.array(ok)).to_pylist()) == \
        normalize(values.take(pa.array(ok)).to_pylist())


def test_decode_and_encode_do_not_import_pandas() -> None:
    """A Python worker's first task decodes and encodes without pyarrow loading pandas (0.3 s
    of CPU): arrays are built from and read through their buffers."""
    from tests.test_import_cost import _pandas_modules_after

    schema = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": ["null", "long"]}, {"name": "s", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "f", "type": "float"}, {"name": "ok", "type": "boolean"},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "u", "type": ["null", "int", "string"]},
        {"name": "xs", "type": {"type": "array", "items": ["null", "double"]}},
        {"name": "m", "type": {"type": "map", "values": "bytes"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                 "scale": 2}}]}
    recs = [{"a": None, "s": "x", "e": "B", "f": 1.5, "ok": True, "d": dt.date(2020, 1, 2),
             "t": EPOCH, "u": "q", "xs": [None, 2.5], "m": {"k": b"v"}, "dec": Decimal("1.25")},
            {"a": 3, "s": "", "e": "A", "f": 0.0, "ok": False, "d": dt.date(1969, 1, 1),
             "t": EPOCH, "u": 4, "xs": [], "m": {}, "dec": Decimal("-3.00")}]
    payloads = write(schema, recs)
    code = (
        "import json, numpy as np, pyarrow as pa\n"
        "from txkafka.connector.serde import avro\n"
        f"payloads = [bytes.fromhex(h) for h in {[p.hex() for p in payloads]!r}]\n"
        "offsets = np.cumsum([0] + [len(p) for p in payloads]).astype(np.int32)\n"
        "col = pa.Array.from_buffers(pa.binary(), len(payloads), [None, pa.py_buffer(offsets),"
        " pa.py_buffer(b''.join(payloads))])\n"
        f"c = avro.codec({json.dumps(schema)!r})\n"
        "res = c.decode(col)\n"
        "assert not res.errors, res.errors\n"
        "enc = c.encode(res.values)\n"
        "assert not enc.errors and enc.payloads.equals(col), enc.errors\n")
    assert _pandas_modules_after(code) == "[]"


def test_schema_from_arrow_refuses_names_avro_does_not_allow() -> None:
    with pytest.raises(AvroSchemaError, match="'bad-name' .* record 'inner'"):
        avro.schema_from_arrow(pa.struct([pa.field("inner", pa.struct([
            pa.field("bad-name", pa.int32())]))]))
    with pytest.raises(AvroSchemaError, match="string keys"):
        avro.schema_from_arrow(pa.struct([pa.field("m", pa.map_(pa.int32(), pa.int32()))]))


def test_one_record_with_thousands_of_string_and_record_items() -> None:
    """A value with many variable-size items (read past in plain Python once few values are
    still going), beside short ones; one cut short is a bad row."""
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "m", "type": {"type": "map", "values": {"type": "record", "name": "V", "fields": [
            {"name": "s", "type": ["null", "string"]}, {"name": "n", "type": "long"},
            {"name": "f", "type": {"type": "fixed", "name": "F", "size": 2}}]}}}]}
    big = {"tags": ["t%d" % i for i in range(3000)],
           "m": {f"k{i}": {"s": None if i % 4 else "é" * (i % 7), "n": -i * 10**9,
                           "f": b"ab"} for i in range(1500)}}
    small = {"tags": ["x"], "m": {"a": {"s": "b", "n": 1, "f": b"cd"}}}
    payloads = write(schema, [big, small, big])
    res = decode(schema, payloads)
    assert res.errors == {}
    got = res.values.to_pylist()
    assert got[0]["tags"] == big["tags"] and got[2] == got[0]
    assert got[0]["m"] == [(k, v) for k, v in big["m"].items()]
    assert got[1]["m"] == [("a", {"s": "b", "n": 1, "f": b"cd"})]
    res = decode(schema, [payloads[0][:len(payloads[0]) // 2], payloads[1]])
    assert list(res.errors) == [0] and res.values.to_pylist()[1] == got[1]


def test_dates_from_date64_and_timestamps_of_each_unit() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}
    day = dt.date(1965, 3, 4)
    at = dt.datetime(2021, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    for d_type in (pa.date32(), pa.date64()):
        for unit in ("s", "ms", "us", "ns"):
            col = pa.array([{"d": day, "t": at}], pa.struct([
                pa.field("d", d_type), pa.field("t", pa.timestamp(unit, tz="UTC"))]))
            got = avro.codec(json.dumps(schema)).encode(col).payloads[0].as_py()
            exact = at.replace(microsecond={"s": 0, "ms": 123000}.get(unit, 123456))
            assert got == write(schema, [{"d": day, "t": exact}])[0], (d_type, unit)


def test_decimal_resolution_keeps_the_scale() -> None:
    w = {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}
    wider = dict(w, precision=20)
    res = decode(w, write(w, [Decimal("1.25")]), wider)
    assert res.values.type == pa.decimal128(20, 2) and res.values.to_pylist() == [Decimal("1.25")]
    with pytest.raises(AvroSchemaError, match="scale 2 .* reader's 3"):
        avro.codec(json.dumps(w), json.dumps(dict(w, scale=3)))


def test_named_types_from_referenced_schemas_in_any_order() -> None:
    """A registry's references: the texts of the schemas whose named types this one uses."""
    zip_code = json.dumps({"type": "fixed", "name": "Zip", "namespace": "shop", "size": 2})
    address = json.dumps({"type": "record", "name": "Address", "namespace": "shop", "fields": [
        {"name": "street", "type": "string"}, {"name": "zip", "type": "shop.Zip"}]})
    order = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"}, {"name": "ship", "type": "Address"},
        {"name": "bill", "type": ["null", "shop.Address"], "default": None}]})
    c = avro.codec(order, writer_references=[address, zip_code])  # Address needs Zip: retried
    values = pa.array([{"id": 1, "ship": {"street": "a", "zip": b"12"}, "bill": None}],
                      c.arrow_type)
    enc = c.encode(values)
    assert not enc.errors and c.decode(enc.payloads).values.to_pylist() == values.to_pylist()
    with pytest.raises(AvroSchemaError, match="'Address'.*register the schema that defines it"):
        avro.codec(order)
    with pytest.raises(AvroSchemaError, match="'shop.Zip'"):
        avro.codec(order, writer_references=[address])


def test_arrays_of_one_store_items_anywhere_in_a_row_encode_fastavro_s_bytes() -> None:
    """Items of int, long, enum, boolean and double arrays may spill over the next items (the
    same store writes those after them); the array as a row's last field, beside others and
    inside array items must still come out byte for byte."""
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": {"type": "array", "items": "long"}},
        {"name": "s", "type": "string"},
        {"name": "b", "type": {"type": "array", "items": "boolean"}},
        {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "I",
                                                              "fields": [
            {"name": "z", "type": "int"},
            {"name": "xs", "type": {"type": "array", "items": "int"}}]}}},
        {"name": "e", "type": {"type": "array", "items": {"type": "enum", "name": "E",
                                                          "symbols": ["A", "BB", "C"]}}},
        {"name": "f", "type": {"type": "array", "items": "double"}},
        {"name": "last", "type": {"type": "array", "items": "long"}}]}
    rnd = random.Random(7)
    edges = [0, 1, -1, 63, 64, 2**20, -2**40, 2**56, 2**62, -2**63, 2**63 - 1]

    def big() -> int:
        return rnd.choice(edges + [rnd.randrange(-2**63, 2**63)])

    rows = [{"a": [big() for _ in range(rnd.randrange(5))], "s": "x" * rnd.randrange(20),
             "b": [rnd.random() < .5 for _ in range(rnd.randrange(4))],
             "items": [{"z": rnd.randrange(-2**31, 2**31),
                        "xs": [rnd.randrange(-2**31, 2**31) for _ in range(rnd.randrange(4))]}
                       for _ in range(rnd.randrange(3))],
             "e": [rnd.choice(["A", "BB", "C"]) for _ in range(rnd.randrange(3))],
             "f": [rnd.random() for _ in range(rnd.randrange(3))],
             "last": [big() for _ in range(rnd.randrange(4))]} for _ in range(3000)]
    c = avro.codec(json.dumps(schema))
    values = pa.array(rows, c.arrow_type)
    for start, n in ((0, 3000), (3, 500), (17, 1)):
        out = c.encode(values.slice(start, n))
        assert not out.errors
        assert out.payloads.to_pylist() == write(schema, rows[start:start + n])


def test_small_values_joined_into_words_encode_fastavro_s_bytes() -> None:
    """Neighbouring values of at most 8 bytes together (a record's small fields, a map entry's
    key and value, a union's tag and branch, strings under 8 bytes) are written as one word;
    strings under 64 bytes as their length and first bytes in one word, then the rest. Byte for
    byte as fastavro, with lengths around those bounds, nulls, empty and long lists, records
    nested in lists in maps, each as a row's last field too, and a slice of the column."""
    small = {"type": "record", "name": "Small", "fields": [
        {"name": "ok", "type": "boolean"}, {"name": "n", "type": "int"},
        {"name": "tag", "type": ["null", "string"]}]}
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "long"},
        {"name": "s", "type": "string"},
        {"name": "smalls", "type": {"type": "array", "items": small}},
        {"name": "m", "type": {"type": "map", "values": ["null", "string"]}},
        {"name": "deep", "type": {"type": "map", "values": {"type": "array", "items": [
            "null", {"type": "record", "name": "Leaf", "fields": [
                {"name": "f", "type": "float"}, {"name": "b", "type": "bytes"},
                {"name": "e", "type": {"type": "enum", "name": "E",
                                       "symbols": ["A", "B"]}}]}]}}},
        {"name": "opt", "type": ["null", "Small"]},
        {"name": "pair", "type": {"type": "record", "name": "Pair", "fields": [
            {"name": "x", "type": "double"}, {"name": "y", "type": "boolean"}]}},
        {"name": "strs", "type": {"type": "array", "items": "string"}},
        {"name": "codes", "type": {"type": "map", "values": ["null", "string"]}},
        {"name": "opts", "type": {"type": "array", "items": ["null", "int"]}},
        {"name": "tiny", "type": ["null", {"type": "record", "name": "Tiny", "fields": [
            {"name": "on", "type": "boolean"}, {"name": "c", "type": ["null", "string"]}]}]},
        {"name": "last", "type": "Small"}]}
    rnd = random.Random(11)
    lengths = [0, 1, 6, 7, 8, 9, 15, 16, 62, 63, 64, 65, 200]

    def text() -> str:
        return "".join(rnd.choice("ab€") for _ in range(rnd.choice(lengths)))

    def small_value() -> dict:
        return {"ok": rnd.random() < .5, "n": rnd.choice([0, -1, 63, -65, 2**31 - 1, -2**31]),
                "tag": None if rnd.random() < .3 else text()}

    rows = [{"id": rnd.choice([0, 1, -2**63, 2**63 - 1, rnd.randrange(-2**40, 2**40)]),
             "s": text(),
             "smalls": [small_value() for _ in range(rnd.choice([0, 0, 1, 2, 9]))],
             "m": {f"k{j}": None if rnd.random() < .3 else text()
                   for j in range(rnd.choice([0, 1, 3]))},
             "deep": {"d" * rnd.randrange(9): [
                 None if rnd.random() < .3 else {
                     "f": float(np.float32(rnd.uniform(-5, 5))),
                     "b": bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 3, 7, 8, 70]))),
                     "e": rnd.choice("AB")}
                 for _ in range(rnd.choice([0, 1, 4]))] for _ in range(rnd.choice([0, 2]))},
             "opt": None if rnd.random() < .4 else small_value(),
             "pair": {"x": rnd.choice([0.0, -0.0, 1e300, float("inf")]), "y": rnd.random() < .5},
             "strs": [text() for _ in range(rnd.choice([0, 1, 5]))],
             "codes": {"c" * j: None if rnd.random() < .3 else "x" * rnd.randrange(6)
                       for j in range(rnd.choice([0, 2]))},
             "opts": [None if rnd.random() < .3 else rnd.choice([0, -1, 2**31 - 1])
                      for _ in range(rnd.choice([0, 3]))],
             "tiny": None if rnd.random() < .3 else {
                 "on": rnd.random() < .5,
                 "c": None if rnd.random() < .3 else "é" * rnd.randrange(3)},
             "last": small_value()} for _ in range(2000)]
    c = avro.codec(json.dumps(schema))
    values = pa.array([{**r, "m": list(r["m"].items()), "codes": list(r["codes"].items()),
                        "deep": [(k, v) for k, v in r["deep"].items()]} for r in rows],
                      c.arrow_type)
    for start, n in ((0, 2000), (5, 700), (1999, 1)):
        out = c.encode(values.slice(start, n))
        assert not out.errors
        assert out.payloads.to_pylist() == write(schema, rows[start:start + n])
    assert c.decode(c.encode(values).payloads).values.to_pylist() == values.to_pylist()


def test_null_in_a_joined_record_inside_a_list_is_one_error_row() -> None:
    """A null where a record of small fields (written as one word) has no null: that row is
    an error naming the field, the rows around it come out as fastavro writes them."""
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "xs", "type": {"type": "array", "items": {"type": "record", "name": "P",
                                                           "fields": [
            {"name": "a", "type": "int"}, {"name": "b", "type": "boolean"}]}}},
        {"name": "c", "type": "int"}]}
    c = avro.codec(json.dumps(schema))
    item = pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.bool_(), False)])
    t = pa.struct([pa.field("xs", pa.list_(pa.field("element", item, False)), False),
                   pa.field("c", pa.int32(), False)])
    rows = [{"xs": [{"a": 1, "b": True}, {"a": 2, "b": False}], "c": 3},
            {"xs": [{"a": 1, "b": True}, {"a": None, "b": False}], "c": 4},
            {"xs": [], "c": -5}]
    out = c.encode(pa.array(rows, t))
    assert list(out.errors) == [1] and "xs[].a" in out.errors[1]
    assert out.payloads.to_pylist() == [write(schema, [rows[0]])[0], None,
                                        write(schema, [rows[2]])[0]]
