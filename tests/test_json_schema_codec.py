"""The JSON Schema codec: Arrow types from draft-07 and 2020-12 schemas, decoding with per-row
errors, column-wise encoding checked by parsing (JSON text is not canonical) and against
confluent-kafka's own JSONSerializer/JSONDeserializer (with its in-process mock:// client: only
the byte layout is checked here; the real registry is the registry tests')."""

from __future__ import annotations

import datetime as dt
import json
import pickle

import pyarrow as pa
import pytest

from txkafka.connector.errors import SchemaFormatError
from txkafka.connector.serde import json_schema

UTC = dt.timezone.utc

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": ["string", "null"]},
        "score": {"type": "number"},
        "paid": {"type": "boolean"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"$ref": "#/$defs/Address"},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "color": {"enum": ["RED", "GREEN"]},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/Address"}},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["id", "address"],
    "$defs": {"Address": {"type": "object", "required": ["zip"],
                          "properties": {"street": {"type": "string"},
                                         "zip": {"type": "integer"}}}},
}
DRAFT7 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "definitions": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}}},
    "properties": {"items": {"type": "array", "items": {"$ref": "#/definitions/Item"}},
                   "n": {"type": ["integer", "null"]}},
}

FULL = {"id": 1, "name": "tab\there \"quoted\" back\\slash \u00e9 \u2603 \u0001 line\nbreak",
        "score": 1.25, "paid": True, "day": "2024-05-01", "at": "2024-05-01T12:00:00.5Z",
        "tags": ["x", ""], "address": {"street": "Main", "zip": 10115},
        "counts": {"k": 1, "j": -2}, "color": "GREEN", "lines": [{"zip": 2}, {"street": "s",
                                                                             "zip": 3}],
        "note": None}
SPARSE = {"id": 2, "address": {"zip": 3}}
# FULL as the codec writes it: null properties left out, microseconds in full.
WRITTEN_FULL = {**{k: v for k, v in FULL.items() if v is not None},
                "at": "2024-05-01T12:00:00.500000Z"}


@pytest.fixture(scope="module")
def order_codec() -> json_schema.JsonSchemaCodec:
    return json_schema.codec(json.dumps(SCHEMA))


def _arrow_row(doc: dict) -> dict:
    """What a document reads as: every property, absent ones null; dates parsed."""
    row = {k: doc.get(k) for k in SCHEMA["properties"]}
    row["address"] = {"street": doc["address"].get("street"), "zip": doc["address"]["zip"]}
    if row["day"]:
        row["day"] = dt.date.fromisoformat(row["day"])
    if row["at"]:
        row["at"] = dt.datetime.fromisoformat(row["at"].replace("Z", "+00:00"))
    if row["counts"] is not None:
        row["counts"] = list(row["counts"].items())
    if row["lines"] is not None:
        row["lines"] = [{"street": x.get("street"), "zip": x["zip"]} for x in row["lines"]]
    return row


def test_arrow_type(order_codec):
    t = order_codec.arrow_type
    assert t == pa.struct([
        ("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
        ("paid", pa.bool_()), ("day", pa.date32()), ("at", pa.timestamp("us", "UTC")),
        ("tags", pa.list_(pa.field("element", pa.string()))),
        ("address", pa.struct([("street", pa.string()), ("zip", pa.int64())])),
        ("counts", pa.map_(pa.string(), pa.int64())), ("color", pa.string()),
        ("lines", pa.list_(pa.field("element", pa.struct([("street", pa.string()),
                                                          ("zip", pa.int64())])))),
        ("note", pa.string())])
    from pyspark.sql.pandas.types import from_arrow_type  # Spark's own reading of Arrow types

    assert from_arrow_type(t).simpleString() == (
        "struct<id:bigint,name:string,score:double,paid:boolean,day:date,at:timestamp,"
        "tags:array<string>,address:struct<street:string,zip:bigint>,counts:map<string,bigint>,"
        "color:string,lines:array<struct<street:string,zip:bigint>>,note:string>")
    assert json_schema.codec(json.dumps(DRAFT7)).arrow_type == pa.struct([
        ("items", pa.list_(pa.field("element", pa.struct([("sku", pa.string())])))),
        ("n", pa.int64())])


def test_decode_compact_and_pretty_printed(order_codec):
    docs = [FULL, SPARSE]
    payloads = [json.dumps(d).encode() for d in docs] + \
        [json.dumps(d, indent=2).encode() for d in docs] + [b"\r\n " + json.dumps(FULL).encode()]
    res = order_codec.decode(pa.array(payloads, pa.binary()))
    assert res.errors == {}
    assert res.values.to_pylist() == [_arrow_row(d) for d in docs + docs + [FULL]]


def test_bad_rows_are_found_without_losing_good_ones(order_codec):
    good = json.dumps(FULL).encode()
    cases = {
        1: (None, None),
        2: (b"", "empty"),
        3: (b" \n ", "empty"),
        4: (b'{"id": "7", "address": {"zip": 1}}', "not a JSON document of the schema"),
        5: (b'{"id": 1.5, "address": {"zip": 1}}', "int64"),
        6: (b'{"id": 1}', "required property $.address"),
        7: (b'{"id": 1, "address": {"street": "x"}}', "required property $.address.zip"),
        8: (b'{"id": 1, "address": {"zip": 1}} {"id": 2, "address": {"zip": 1}}',
            "more than one JSON document"),
        9: (b'{"id": 1, "address": {"zip": 1}, "day": "2024-02-30"}', "not a date"),
        10: (b'{"id": 1, "address": {"zip": 1}, "color": "BLUE"}', "'BLUE' is not one of"),
        11: (b'{"id": 1, "address": {"zip": 1}, "counts": {"a": "x"}}', "/counts/a"),
        12: (b"[1, 2]", "not a JSON object"),
        13: (b'{"id": 1, "address": {"zip": 1', "not a JSON document"),
        14: (b'{"id": 1, "name": "\xff\xfe", "address": {"zip": 1}}', "not UTF-8"),
        15: (b'{"id": null, "address": {"zip": 1}}', "required property $.id"),
        16: (b"null", "not a JSON object"),  # pyarrow's reader would crash on it
        17: (b' null', "not a JSON object"),
        18: (b'{"id": 1, "address": {"zip": 1}} null', "more than one JSON document"),
        19: (b'"text"', "not a JSON object"),
    }
    payloads = [good] + [p for p, _ in cases.values()] + [good]
    res = order_codec.decode(pa.array(payloads, pa.binary()))
    assert sorted(res.errors) == [i for i, (_, why) in cases.items() if why]
    for i, (_, why) in cases.items():
        if why:
            assert why in res.errors[i], (i, res.errors[i])
    values = res.values.to_pylist()
    assert values[0] == values[-1] == _arrow_row(FULL)
    assert all(v is None for v in values[1:-1])


def test_encode_round_trips_by_value(order_codec):
    rows = [_arrow_row(FULL), _arrow_row(SPARSE), None]
    res = order_codec.encode(pa.array(rows, order_codec.arrow_type))
    assert res.errors == {} and res.payloads[2].as_py() is None
    docs = [json.loads(p) for p in res.payloads.to_pylist()[:2]]
    assert docs == [WRITTEN_FULL, SPARSE]
    assert order_codec.decode(res.payloads).values.to_pylist() == rows


def test_maps_keep_their_text_and_may_stand_in_arrays():
    """A map's keys differ from row to row; a date-like string stays text (pyarrow's own
    inference would make it a timestamp)."""
    codec = json_schema.codec(json.dumps({"type": "object", "properties": {
        "m": {"type": "object", "additionalProperties": {"type": "string"}},
        "l": {"type": "array", "items": {"type": "object", "properties": {
            "mm": {"type": "object", "additionalProperties": {"type": "number"}}}}}}}))
    docs = [{"m": {"day": "2024-05-01", "at": "2024-05-01T12:00:00", "x": "y"},
             "l": [{"mm": {"a": 1}}, {"mm": {"b": 2.5}}]},
            {"m": {"z": "w"}}, {"m": {}, "l": []}]
    res = codec.decode(pa.array([json.dumps(d).encode() for d in docs] + [b'{"m": {"k": 5}}'],
                                pa.binary()))
    assert list(res.errors) == [3] and "/m/k" in res.errors[3]
    assert res.values.to_pylist()[:3] == [
        {"m": [("day", "2024-05-01"), ("at", "2024-05-01T12:00:00"), ("x", "y")],
         "l": [{"mm": [("a", 1.0)]}, {"mm": [("b", 2.5)]}]},
        {"m": [("z", "w")], "l": None}, {"m": [], "l": []}]
    back = codec.encode(res.values.slice(0, 3)).payloads.to_pylist()
    assert [json.loads(p) for p in back] == [docs[0], {"m": {"z": "w"}}, docs[2]]


def test_encode_leaves_out_null_properties_wherever_they_stand():
    codec = json_schema.codec(json.dumps({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}}}))
    rows = [{"a": 1, "b": None, "c": True}, {"a": None, "b": "x", "c": None},
            {"a": None, "b": None, "c": None}, {"a": 2, "b": "y", "c": False}]
    payloads = codec.encode(pa.array(rows, codec.arrow_type)).payloads.to_pylist()
    assert payloads == [b'{"a":1,"c":true}', b'{"b":"x"}', b"{}", b'{"a":2,"b":"y","c":false}']


def test_encode_refuses_rows_it_cannot_write(order_codec):
    t = order_codec.arrow_type
    res = order_codec.encode(pa.array([_arrow_row(SPARSE), {"id": 1, "address": None},
                                       {"id": None, "address": {"zip": 1}},
                                       {"id": 1, "address": {"zip": 1}, "score": float("nan")}],
                                      t))
    assert sorted(res.errors) == [1, 2, 3]
    assert "$.address" in res.errors[1] and "$.id" in res.errors[2]
    assert "no JSON number" in res.errors[3]
    assert res.payloads[0].as_py() is not None
    with pytest.raises(SchemaFormatError, match="cannot be written"):
        order_codec.encode(pa.array([1, 2]))


def test_confluent_serializers_agree(order_codec):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient.new_client({"url": "mock://json-schema-codec"})
    ctx = SerializationContext("orders", MessageField.VALUE)
    text = json.dumps(SCHEMA)
    framed = [JSONSerializer(text, client)(doc, ctx) for doc in (FULL, SPARSE)]
    assert all(f[0] == 0 for f in framed)
    res = order_codec.decode(pa.array([f[5:] for f in framed], pa.binary()))
    assert res.errors == {} and res.values.to_pylist() == [_arrow_row(FULL), _arrow_row(SPARSE)]
    ours = order_codec.encode(res.values).payloads.to_pylist()
    deserialize = JSONDeserializer(text)  # validates against the schema as it reads
    back = [deserialize(f[:5] + p, ctx) for f, p in zip(framed, ours)]
    assert back == [WRITTEN_FULL, SPARSE]


def test_a_codec_travels_by_pickle(order_codec):
    """Spark ships what the driver made to its executors by pickle."""
    copy = pickle.loads(pickle.dumps(order_codec))
    payloads = pa.array([json.dumps(FULL).encode()], pa.binary())
    assert copy.decode(payloads).values == order_codec.decode(payloads).values


def test_optional_full_validation():
    schema = {"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "n": {"type": "integer", "minimum": 0}}}
    lax = json_schema.codec(json.dumps(schema))
    strict = json_schema.codec(json.dumps(schema), validate=True)
    payloads = pa.array([b'{"code": "ABC", "n": 1}', b'{"code": "abc", "n": 1}',
                         b'{"code": "ABC", "n": -1}'], pa.binary())
    assert lax.decode(payloads).errors == {}
    res = pickle.loads(pickle.dumps(strict)).decode(payloads)
    assert sorted(res.errors) == [1, 2]
    assert "$.code" in res.errors[1] and "$.n" in res.errors[2]
    assert res.values.to_pylist()[0] == {"code": "ABC", "n": 1}


@pytest.mark.parametrize("schema, match", [
    ("{not json", "not JSON"),
    ({"type": "string"}, "top level must be an object"),
    ({"type": "object", "properties": {"a": {}}}, "allows any value"),
    ({"type": "object", "properties": {"a": {"type": ["string", "integer"]}}},
     "no single Arrow type"),
    ({"type": "object", "properties": {"a": {"type": "object"}}}, "neither"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}, "not found"),
    ({"type": "object", "properties": {"a": {"$ref": "other.json"}}}, "outside the document"),
    ({"type": "object", "$defs": {"T": {"type": "object", "properties": {
        "child": {"$ref": "#/$defs/T"}}}}, "properties": {"t": {"$ref": "#/$defs/T"}}},
     "recursive"),
    ({"type": "object", "properties": {"a": {"type": "array"}}}, "items"),
])
def test_bad_schemas_are_refused_clearly(schema, match):
    text = schema if isinstance(schema, str) else json.dumps(schema)
    with pytest.raises(SchemaFormatError, match=match):
        json_schema.codec(text)


DERIVED = pa.struct([
    pa.field("id", pa.int64(), False), pa.field("name", pa.string()),
    pa.field("part", pa.struct([pa.field("sku", pa.string(), False),
                                pa.field("w", pa.float64())])),
    pa.field("tags", pa.list_(pa.string())), pa.field("m", pa.map_(pa.string(), pa.int32())),
    pa.field("ts", pa.timestamp("us", "UTC")), pa.field("d", pa.date32()),
    pa.field("ok", pa.bool_())])


def test_schema_from_arrow_requires_the_fields_that_are_not_nullable():
    doc = json.loads(json_schema.schema_from_arrow(DERIVED, "Item", "shop"))
    assert doc["title"] == "shop.Item" and doc["type"] == "object"
    assert doc["required"] == ["id"] and doc["properties"]["id"] == {"type": "integer"}
    assert doc["properties"]["part"] == {
        "type": ["object", "null"], "required": ["sku"],
        "properties": {"sku": {"type": "string"}, "w": {"type": ["number", "null"]}}}
    assert doc["properties"]["m"] == {"type": ["object", "null"],
                                      "additionalProperties": {"type": ["integer", "null"]}}
    assert doc["properties"]["ts"] == {"type": ["string", "null"], "format": "date-time"}
    codec = json_schema.codec(json.dumps(doc))
    values = pa.array([
        {"id": 1, "name": None, "part": {"sku": "a", "w": 1.5}, "tags": ["x", None],
         "m": [("k", 2)], "ts": dt.datetime(2024, 1, 1, 0, 0, 0, 123456), "d": dt.date(2024, 2, 3),
         "ok": True},
        {"id": 2, "name": "n", "part": None, "tags": None, "m": None, "ts": None, "d": None,
         "ok": None}], DERIVED)
    enc = codec.encode(values)
    assert not enc.errors
    assert codec.decode(enc.payloads).values.to_pylist() == values.cast(
        codec.arrow_type).to_pylist()
    import jsonschema
    for payload in enc.payloads.to_pylist():
        jsonschema.validate(json.loads(payload), doc)


@pytest.mark.parametrize("t, match", [
    (pa.struct([pa.field("b", pa.binary())]), "field 'b'.*base64"),
    (pa.struct([pa.field("p", pa.struct([pa.field("n", pa.decimal128(10, 2))]))]),
     "field 'p.n'.*cast it to a double"),
    (pa.struct([pa.field("m", pa.map_(pa.int32(), pa.int32()))]), "field 'm'.*keys"),
    (pa.struct([pa.field("m", pa.map_(pa.string(), pa.list_(pa.int32())))]),
     "field 'm'.*map's values"),
    (pa.int32(), "struct column"),
])
def test_schema_from_arrow_refuses_types_without_a_json_form(t, match):
    with pytest.raises(SchemaFormatError, match=match):
        json_schema.schema_from_arrow(t)


def test_refs_to_referenced_documents_by_their_registered_names():
    address = {"$defs": {"Zip": {"type": "string"}}, "type": "object", "properties": {
        "street": {"type": "string"}, "zip": {"$ref": "#/$defs/Zip"}}, "required": ["street"]}
    order = {"type": "object", "properties": {
        "id": {"type": "integer"}, "ship": {"$ref": "address.json"},
        "zips": {"type": "array", "items": {"$ref": "address.json#/$defs/Zip"}}}}
    codec = json_schema.codec(json.dumps(order), references={"address.json": json.dumps(address)})
    assert codec.arrow_type == pa.struct([
        ("id", pa.int64()), ("ship", pa.struct([("street", pa.string()), ("zip", pa.string())])),
        ("zips", pa.list_(pa.field("element", pa.string())))])
    res = codec.decode(pa.array([b'{"id": 1, "ship": {"street": "a", "zip": "12"}, "zips": ["9"]}',
                                 b'{"id": 2, "ship": {"zip": "12"}}'], pa.binary()))
    assert res.values.to_pylist()[0] == {"id": 1, "ship": {"street": "a", "zip": "12"},
                                         "zips": ["9"]}
    assert list(res.errors) == [1] and "street" in res.errors[1]
    pickle.loads(pickle.dumps(codec))  # shipped to executors self-contained
    with pytest.raises(SchemaFormatError, match="'other.json', which is not among the schema's "
                                                "references \\(address.json\\)"):
        json_schema.codec(json.dumps({**order, "properties": {"x": {"$ref": "other.json"}}}),
                          references={"address.json": json.dumps(address)})
    with pytest.raises(SchemaFormatError, match="schema has no references"):
        json_schema.codec(json.dumps(order))
    loop = {"type": "object", "properties": {"me": {"$ref": "loop.json"}}}
    with pytest.raises(SchemaFormatError, match="recursive"):
        json_schema.codec(json.dumps({"type": "object", "properties": {"a": {"$ref": "loop.json"}}}),
                          references={"loop.json": json.dumps(loop)})


def test_timestamp_ntz_round_trips_as_a_local_date_time():
    """A local date-time (Spark's timestamp_ntz) has no offset, which RFC 3339's date-time
    requires: it is derived as format datetime-local, written without an offset and read back
    as timestamp_ntz; an instant stays date-time. confluent_kafka's deserializer, which
    validates each document, accepts what is written."""
    t = pa.struct([pa.field("id", pa.int64(), False), pa.field("local", pa.timestamp("us")),
                   pa.field("at", pa.timestamp("us", "UTC"))])
    doc = json.loads(json_schema.schema_from_arrow(t, "Item", "shop"))
    assert doc["properties"]["local"] == {"type": ["string", "null"], "format": "datetime-local"}
    assert doc["properties"]["at"] == {"type": ["string", "null"], "format": "date-time"}
    codec = json_schema.codec(json.dumps(doc))
    assert codec.arrow_type == pa.struct([("id", pa.int64()), ("local", pa.timestamp("us")),
                                          ("at", pa.timestamp("us", "UTC"))])
    from pyspark.sql.pandas.types import from_arrow_type

    assert from_arrow_type(codec.arrow_type).simpleString() == (
        "struct<id:bigint,local:timestamp_ntz,at:timestamp>")
    rows = [{"id": 1, "local": dt.datetime(2024, 3, 31, 2, 30, 0, 123456),
             "at": dt.datetime(2024, 3, 31, 2, 30, tzinfo=UTC)},
            {"id": 2, "local": dt.datetime(1, 1, 1), "at": None},
            {"id": 3, "local": None, "at": None}]
    values = pa.array(rows, t)
    enc = codec.encode(values)
    assert enc.errors == {}
    assert [json.loads(p) for p in enc.payloads.to_pylist()] == [
        {"id": 1, "local": "2024-03-31T02:30:00.123456", "at": "2024-03-31T02:30:00.000000Z"},
        {"id": 2, "local": "0001-01-01T00:00:00.000000"}, {"id": 3}]
    back = codec.decode(enc.payloads)
    assert back.errors == {} and back.values.type == codec.arrow_type
    assert back.values.to_pylist() == values.cast(codec.arrow_type).to_pylist()

    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserialize = JSONDeserializer(json.dumps(doc))  # validates with the schema it is given
    ctx = SerializationContext("items", MessageField.VALUE)
    for p in enc.payloads.to_pylist():
        assert deserialize(b"\x00\x00\x00\x00\x01" + p, ctx) == json.loads(p)
    with pytest.raises(Exception, match="is not of type 'string'"):  # it does validate
        deserialize(b'\x00\x00\x00\x00\x01{"id": 1, "local": 5}', ctx)


def test_datetime_local_values_without_an_offset_are_read_and_others_are_bad_rows():
    codec = json_schema.codec(json.dumps({"type": "object", "properties": {
        "at": {"type": "string", "format": "datetime-local"},
        "all": {"type": "array", "items": {"type": "string", "format": "datetime-local"}}}}))
    assert codec.arrow_type.field("at").type == pa.timestamp("us")
    good = {
        '"2024-05-01T12:00:00"': dt.datetime(2024, 5, 1, 12),
        '"2024-05-01T12:00"': dt.datetime(2024, 5, 1, 12),  # HTML's datetime-local
        '"2024-05-01 12:00:00.5"': dt.datetime(2024, 5, 1, 12, 0, 0, 500000),
        '"2024-05-01T12:00:00.123456789"': dt.datetime(2024, 5, 1, 12, 0, 0, 123456),
        "null": None,
    }
    bad = ['"2024-05-01T12:00:00Z"', '"2024-05-01T12:00:00+02:00"', '"2024-02-30T00:00:00"',
           '"2024-05-01"', '"noon"', '"2024-05-01T25:00:00"']
    payloads = [f'{{"at": {v}}}'.encode() for v in [*good, *bad]]
    payloads.append(b'{"all": ["2024-05-01T12:00:00", "2024-05-01T12:00:00-05:00"]}')
    payloads.append(b'{"all": ["2024-05-01T12:00:00", "2024-05-01T13:00:00"]}')
    res = codec.decode(pa.array(payloads, pa.binary()))
    assert sorted(res.errors) == list(range(len(good), len(payloads) - 1))
    for i in res.errors:
        assert "is not a local date-time" in res.errors[i], res.errors[i]
    assert "$.all[]" in res.errors[len(payloads) - 2]
    values = res.values.to_pylist()
    assert [v and v["at"] for v in values[:len(good)]] == list(good.values())
    assert values[-1] == {"at": None, "all": [dt.datetime(2024, 5, 1, 12),
                                              dt.datetime(2024, 5, 1, 13)]}
