"""The Protobuf codec: Arrow types as Spark's from_protobuf, payload bytes checked against the
protobuf library's own serialization and the message-index framing against confluent-kafka's
ProtobufSerializer/ProtobufDeserializer (with an in-process stand-in client: only the byte
layout is checked here; the real registry is the registry tests')."""

from __future__ import annotations

import base64
import datetime as dt
import pickle

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2, message_factory

from txkafka.connector.errors import SchemaFormatError
from txkafka.connector.serde import protobuf

SCHEMA = """
syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "shop/common.proto";

enum Color { RED = 0; GREEN = 1; BLUE = 2; }

message Order {
  int64 id = 1;
  string name = 2;
  double score = 3;
  bool paid = 4;
  bytes blob = 5;
  Color color = 6;
  repeated int32 nums = 7;
  map<string, int64> counts = 8;
  Address address = 9;
  repeated Address others = 10;
  google.protobuf.Timestamp created = 11;
  google.protobuf.Duration wait = 12;
  google.protobuf.Int32Value maybe = 13;
  oneof choice { string text = 14; int32 number = 15; }
  optional int32 opt = 16;
  sint64 zig = 17;
  fixed32 fix = 18;
  uint64 big = 19;
  float ratio = 20;
  message Line { string sku = 1; int32 qty = 2; }
  repeated Line lines = 21;
}
"""
COMMON = """
syntax = "proto3";
package shop.v1;
message Address { string street = 1; int32 zip = 2; }
"""
REFS = {"shop/common.proto": COMMON}


@pytest.fixture(scope="module")
def order_codec() -> protobuf.ProtobufCodec:
    return protobuf.codec(SCHEMA, REFS)


def _class(codec: protobuf.ProtobufCodec, name: str | None = None):
    desc = codec.descriptor if name is None else codec.descriptor.file.pool \
        .FindMessageTypeByName(name)
    return message_factory.GetMessageClass(desc)


def _order(codec, i: int):
    m = _class(codec)(id=i, name=f"order {i} \u00e9", score=i / 3, paid=i % 2 == 1,
                      blob=bytes([i % 256, 0]), color=i % 3, nums=[i, -i, 7],
                      address={"street": "Main", "zip": i}, others=[{"street": "x", "zip": 1}],
                      zig=-i, fix=2**32 - 1, big=2**64 - 1 - i, ratio=0.5,
                      lines=[{"sku": "a", "qty": i}])
    m.counts["k"] = i
    m.created.FromDatetime(dt.datetime(2024, 5, 1, 12, 0, i % 60, 123456))
    m.wait.FromTimedelta(dt.timedelta(seconds=90, microseconds=5))
    if i % 2:
        m.maybe.value = i
        m.text = "t"
        m.opt = 0
    else:
        m.number = i
    return m


def test_arrow_type_follows_spark(order_codec):
    t = order_codec.arrow_type
    assert order_codec.message == "shop.v1.Order"  # the first message of the schema's own file
    assert order_codec.message_indexes == [0]
    expect = {
        "id": pa.int64(), "name": pa.string(), "score": pa.float64(), "paid": pa.bool_(),
        "blob": pa.binary(), "color": pa.string(), "created": pa.timestamp("us", "UTC"),
        "wait": pa.duration("us"), "maybe": pa.int32(), "text": pa.string(),
        "number": pa.int32(), "opt": pa.int32(), "zig": pa.int64(), "fix": pa.int32(),
        "big": pa.int64(), "ratio": pa.float32(),
    }
    for name, typ in expect.items():
        assert t.field(name).type == typ, name
    assert t.field("nums").type == pa.list_(pa.field("element", pa.int32()))
    assert pa.types.is_map(t.field("counts").type)
    assert t.field("address").type == pa.struct([("street", pa.string()), ("zip", pa.int32())])
    assert t.field("lines").type.value_type == pa.struct([("sku", pa.string()),
                                                         ("qty", pa.int32())])

    from pyspark.sql.pandas.types import from_arrow_type  # Spark's own reading of Arrow types

    assert from_arrow_type(t).simpleString() == (
        "struct<id:bigint,name:string,score:double,paid:boolean,blob:binary,color:string,"
        "nums:array<int>,counts:map<string,bigint>,address:struct<street:string,zip:int>,"
        "others:array<struct<street:string,zip:int>>,created:timestamp,"
        "wait:interval day to second,maybe:int,text:string,number:int,opt:int,zig:bigint,"
        "fix:int,big:bigint,ratio:float,lines:array<struct<sku:string,qty:int>>>")

    def all_nullable(typ: pa.DataType) -> bool:
        if pa.types.is_struct(typ):
            return all(f.nullable and all_nullable(f.type) for f in typ)
        if pa.types.is_list(typ):
            return typ.value_field.nullable and all_nullable(typ.value_type)
        return True
    assert all_nullable(t)


def test_decode_matches_protobuf_library(order_codec):
    msgs = [_order(order_codec, i) for i in range(50)]
    payloads = pa.array([b"\x00" + m.SerializeToString() for m in msgs], pa.binary())
    res = order_codec.decode(payloads)
    assert res.errors == {}
    rows = res.values.to_pylist()
    for m, row in zip(msgs, rows):
        assert row["id"] == m.id and row["name"] == m.name and row["score"] == m.score
        assert row["blob"] == m.blob and row["color"] == ["RED", "GREEN", "BLUE"][m.color]
        assert row["nums"] == list(m.nums) and dict(row["counts"]) == dict(m.counts)
        assert row["address"] == {"street": "Main", "zip": m.id}
        assert row["created"] == m.created.ToDatetime(tzinfo=dt.timezone.utc)
        assert row["wait"] == dt.timedelta(seconds=90, microseconds=5)
        assert row["maybe"] == (m.maybe.value if m.HasField("maybe") else None)
        assert row["text"] == (m.text if m.WhichOneof("choice") == "text" else None)
        assert row["number"] == (m.number if m.WhichOneof("choice") == "number" else None)
        assert row["opt"] == (0 if m.HasField("opt") else None)
        assert row["zig"] == -m.id
        assert row["fix"] == -1  # uint32 bits in Spark's IntegerType
        assert row["big"] == m.big - 2**64  # uint64 bits in Spark's LongType
        assert row["lines"] == [{"sku": "a", "qty": m.id}]


def test_encode_is_byte_for_byte_the_protobuf_library(order_codec):
    msgs = [_order(order_codec, i) for i in range(50)]
    payloads = pa.array([b"\x00" + m.SerializeToString() for m in msgs], pa.binary())
    back = order_codec.encode(order_codec.decode(payloads).values)
    assert back.errors == {}
    # A map entry whose value is the default (order 0's counts) is written without it, which
    # the library writes: both are valid, so that row is compared parsed.
    assert back.payloads.to_pylist()[1:] == payloads.to_pylist()[1:]
    assert _class(order_codec).FromString(back.payloads[0].as_py()[1:]) == msgs[0]


def test_nulls_and_corrupt_rows_are_reported_per_row(order_codec):
    good = b"\x00" + _order(order_codec, 1).SerializeToString()
    payloads = pa.array([good, None, b"\x00\xff\xff", b"", b"\x02\x02" + good[1:],
                         b"\x00\x12\x02\xff\xfe", good, b"\x00"], pa.binary())
    res = order_codec.decode(payloads)
    assert sorted(res.errors) == [2, 3, 4, 5]
    assert "corrupt" in res.errors[2] and "varint" in res.errors[2]
    assert "message indexes" in res.errors[3]
    assert "[1]" in res.errors[4] and "shop.v1.Order" in res.errors[4]
    assert "UTF-8" in res.errors[5]
    values = res.values.to_pylist()
    assert [v is None for v in values] == [False, True, True, True, True, True, False, False]
    assert values[0] == values[6] and values[7]["id"] == 0  # an empty message: all defaults
    assert len(res.values) == len(payloads) and res.values.type == order_codec.arrow_type


def test_longer_encoding_of_the_first_message_index_is_read(order_codec):
    good = _order(order_codec, 3).SerializeToString()
    res = order_codec.decode(pa.array([b"\x02\x00" + good, b"\x00" + good], pa.binary()))
    assert res.errors == {} and res.values[0] == res.values[1]


def test_nested_message_indexes_and_confluent_framing(order_codec):
    """A nested message: its indexes as confluent-kafka writes and reads them."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import (ProtobufDeserializer,
                                                          ProtobufSerializer)
    from confluent_kafka.serialization import MessageField, SerializationContext

    # confluent-kafka's own in-process client (mock://): only the framing is checked here.
    client = SchemaRegistryClient.new_client({"url": "mock://protobuf-codec"})
    ctx = SerializationContext("orders", MessageField.VALUE)
    line_codec = protobuf.codec(SCHEMA, REFS, message="shop.v1.Order.Line")
    assert line_codec.message_indexes == [0, 1]  # the map field's entry type is nested type 0
    Line = _class(order_codec, "shop.v1.Order.Line")
    Order = _class(order_codec)
    for cls, codec, value in ((Line, line_codec, Line(sku="s", qty=3)),
                              (Order, order_codec, _order(order_codec, 5))):
        ser = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
        framed = ser(value, ctx)
        assert framed[0] == 0
        res = codec.decode(pa.array([framed[5:]], pa.binary()))
        assert res.errors == {}
        ours = codec.encode(res.values).payloads[0].as_py()
        assert ours == framed[5:]  # indexes and message, byte for byte
        back = ProtobufDeserializer(cls, {"use.deprecated.format": False})(framed[:5] + ours,
                                                                           ctx)
        assert back == value


def test_serialized_descriptor_needs_no_protoc(order_codec):
    """The registry's format=serialized answer (base64 FileDescriptorProto) gives the same
    codec as the .proto text."""
    def b64(desc) -> str:
        p = descriptor_pb2.FileDescriptorProto()
        desc.CopyToProto(p)
        return base64.b64encode(p.SerializeToString()).decode()
    file = order_codec.descriptor.file
    common = file.pool.FindFileByName("shop/common.proto")
    codec = protobuf.codec(b64(file), {"shop/common.proto": b64(common)})
    assert codec.arrow_type == order_codec.arrow_type
    payload = pa.array([b"\x00" + _order(order_codec, 2).SerializeToString()], pa.binary())
    assert codec.decode(payload).values == order_codec.decode(payload).values


def test_a_codec_travels_by_pickle(order_codec):
    """Spark ships what the driver made to its executors by pickle."""
    copy = pickle.loads(pickle.dumps(order_codec))
    payload = pa.array([b"\x00" + _order(order_codec, 4).SerializeToString()], pa.binary())
    assert copy.arrow_type == order_codec.arrow_type and copy.message == order_codec.message
    assert copy.decode(payload).values == order_codec.decode(payload).values


def test_fields_added_and_removed_by_number_just_work():
    old = protobuf.codec('syntax = "proto3"; message R { int32 a = 1; string gone = 2; }')
    new = protobuf.codec('syntax = "proto3"; message R { int32 a = 1; bool fresh = 3; }')
    written = old.encode(pa.array([{"a": 7, "gone": "x"}], old.arrow_type)).payloads
    assert new.decode(written).values.to_pylist() == [{"a": 7, "fresh": False}]


def test_proto2_required_fields_are_checked_both_ways():
    codec = protobuf.codec('syntax = "proto2"; message R { required string s = 1; '
                           'optional int32 x = 2 [default = 42]; optional Inner in = 3; '
                           'message Inner { required int32 k = 1; } }')
    res = codec.decode(pa.array([b"\x00\x0a\x01a", b"\x00\x10\x05", b"\x00\x0a\x01a\x1a\x00"],
                                pa.binary()))
    assert res.values.to_pylist()[0] == {"s": "a", "x": None, "in": None}  # absent: null
    assert res.errors == {1: "required field 's' is missing",
                          2: "required field 'in.k' is missing"}
    enc = codec.encode(pa.array([{"s": "b", "x": 1, "in": {"k": 2}}, {"s": None, "x": 1,
                                                                        "in": None}],
                                codec.arrow_type))
    assert list(enc.errors) == [1] and "'s'" in enc.errors[1]
    assert codec.decode(enc.payloads.slice(0, 1)).values.to_pylist() == [
        {"s": "b", "x": 1, "in": {"k": 2}}]


def test_encode_null_rows_and_misfits():
    codec = protobuf.codec('syntax = "proto3"; package shop.v1; enum Color { RED = 0; '
                           'GREEN = 1; } message O { int64 id = 1; Color color = 2; }')
    res = codec.encode(pa.array([{"id": 1, "color": "GREEN"}, None,
                                 {"id": 2, "color": "PURPLE"}], codec.arrow_type))
    assert res.payloads[1].as_py() is None
    assert list(res.errors) == [2] and "'PURPLE' is not a value of enum shop.v1.Color" \
        in res.errors[2]
    assert codec.decode(res.payloads.slice(0, 1)).values[0]["color"].as_py() == "GREEN"
    with pytest.raises(SchemaFormatError, match="cannot be written"):
        codec.encode(pa.array([1, 2]))


def test_encode_refuses_nulls_that_protobuf_would_write_as_defaults():
    """A null where the field has no presence would read back as 0 or empty: refused per row."""
    codec = protobuf.codec('syntax = "proto3"; message R { int32 plain = 1; optional int32 opt '
                           '= 2; repeated int32 xs = 3; map<string, int32> m = 4; '
                           'repeated I ins = 5; message I { int32 k = 1; } }')
    full = {"plain": 1, "opt": None, "xs": [1], "m": [("a", 1)], "ins": [{"k": 1}]}
    rows = [full, {**full, "plain": None}, {**full, "xs": None}, {**full, "xs": [1, None]},
            {**full, "m": [("a", None)]}, {**full, "ins": [None]}, {**full, "m": None}]
    res = codec.encode(pa.array(rows, codec.arrow_type))
    assert sorted(res.errors) == [1, 2, 3, 4, 5, 6]
    assert "field 'plain' is null" in res.errors[1] and "default 0" in res.errors[1]
    assert "field 'xs' is null" in res.errors[2] and "empty list" in res.errors[2]
    assert "null as an element" in res.errors[3] and "null as a map value" in res.errors[4]
    assert "null as an element" in res.errors[5] and "field 'm' is null" in res.errors[6]
    assert codec.decode(res.payloads.slice(0, 1)).values.to_pylist() == [full]


@pytest.mark.parametrize("schema, refs, message, match", [
    ('syntax = "proto3"; message A { int32 a = 1 }', None, None, "protoc could not parse"),
    ('syntax = "proto3"; import "x/y.proto"; message A { int32 a = 1; }', None, None,
     "x/y.proto"),
    ('syntax = "proto3"; message A { int32 a = 1; }', None, "B", "no message 'B'"),
    ('syntax = "proto3"; enum E { X = 0; }', None, None, "defines no message"),
    (SCHEMA, REFS, "shop.v1.Address", "not in the schema's own file"),
    ('syntax = "proto3"; message T { T child = 1; }', None, None, "recursive"),
    ('syntax = "proto3"; import "../x.proto"; message A { int32 a = 1; }',
     {"../x.proto": 'syntax = "proto3";'}, None, "not a relative import path"),
])
def test_bad_schemas_are_refused_clearly(schema, refs, message, match):
    with pytest.raises(SchemaFormatError, match=match):
        protobuf.codec(schema, refs, message)


DERIVED = pa.struct([
    pa.field("id", pa.int64(), False), pa.field("name", pa.string()),
    pa.field("part", pa.struct([pa.field("sku", pa.string()), pa.field("Part", pa.float64())])),
    pa.field("tags", pa.list_(pa.string())), pa.field("m", pa.map_(pa.string(), pa.struct(
        [pa.field("x", pa.int32())]))), pa.field("ts", pa.timestamp("us", "UTC")),
    pa.field("wait", pa.duration("us")), pa.field("blob", pa.binary())])


def test_schema_from_arrow_is_proto3_with_optional_for_nullable_scalars():
    text = protobuf.schema_from_arrow(DERIVED, "Item", "shop.v1")
    assert text == """syntax = "proto3";
package shop.v1;
import "google/protobuf/duration.proto";
import "google/protobuf/timestamp.proto";

message Item {
  int64 id = 1;
  optional string name = 2;
  Part part = 3;
  repeated string tags = 4;
  map<string, MValue> m = 5;
  google.protobuf.Timestamp ts = 6;
  google.protobuf.Duration wait = 7;
  optional bytes blob = 8;
  message Part {
    optional string sku = 1;
    optional double Part = 2;
  }
  message MValue {
    optional int32 x = 1;
  }
}
"""
    codec = protobuf.codec(text)
    rows = [{"id": 1, "name": None, "part": {"sku": "a", "Part": None}, "tags": ["t"],
             "m": [("k", {"x": None})], "ts": None, "wait": None, "blob": b"\x00"},
            {"id": 2, "name": "", "part": None, "tags": [], "m": [], "ts": None,
             "wait": None, "blob": None}]
    values = pa.array(rows, DERIVED)
    enc = codec.encode(values)
    assert not enc.errors
    # Nulls stay nulls (presence), "" stays "": nothing is read back as another value.
    assert codec.decode(enc.payloads).values.to_pylist() == values.cast(
        codec.arrow_type).to_pylist()


def test_timestamp_ntz_is_written_as_its_utc_wall_clock_and_read_back_as_timestamp():
    """Protobuf has no local date-time among its well-known types: a timestamp_ntz column is
    derived as google.protobuf.Timestamp, its wall-clock time taken as UTC, and reads back as a
    timestamp (an instant) whose UTC wall-clock time is the one written."""
    t = pa.struct([pa.field("local", pa.timestamp("us"))])
    text = protobuf.schema_from_arrow(t, "Item", "shop.v1")
    assert "google.protobuf.Timestamp local = 1;" in text
    codec = protobuf.codec(text)
    assert codec.arrow_type == pa.struct([("local", pa.timestamp("us", "UTC"))])
    from pyspark.sql.pandas.types import from_arrow_type

    assert from_arrow_type(codec.arrow_type).simpleString() == "struct<local:timestamp>"
    wall = dt.datetime(2024, 3, 31, 2, 30, 0, 123456)
    enc = codec.encode(pa.array([{"local": wall}, {"local": None}], t))
    assert enc.errors == {}
    Item = message_factory.GetMessageClass(codec.descriptor)
    m = Item.FromString(enc.payloads[0].as_py()[1:])  # after the message index 0
    assert m.local.ToMicroseconds() == (wall - dt.datetime(1970, 1, 1)) // dt.timedelta(
        microseconds=1)
    assert codec.decode(enc.payloads).values.to_pylist() == [
        {"local": wall.replace(tzinfo=dt.timezone.utc)}, {"local": None}]


@pytest.mark.parametrize("t, match", [
    (pa.struct([pa.field("d", pa.date32())]), "field 'd'.*cast it to a timestamp"),
    (pa.struct([pa.field("p", pa.struct([pa.field("n", pa.decimal128(10, 2))]))]),
     "field 'p.n'.*cast it to a double"),
    (pa.struct([pa.field("xs", pa.list_(pa.list_(pa.int32())))]), "field 'xs\\[\\]'.*wrap"),
    (pa.struct([pa.field("m", pa.map_(pa.float64(), pa.int32()))]), "field 'm'.*map keys"),
    (pa.struct([pa.field("bad name", pa.int32())]), "not a Protobuf identifier"),
    (pa.struct([pa.field("a_b", pa.int32()), pa.field("aB", pa.int32())]),
     "fields 'a_b' and 'aB' have the same Protobuf JSON name"),
    (pa.struct([pa.field("p", pa.struct([pa.field("s", pa.int32()), pa.field("S", pa.int32())]))]),
     "fields 'p.s' and 'p.S'"),
    (pa.int32(), "struct column"),
])
def test_schema_from_arrow_refuses_types_without_a_protobuf_form(t, match):
    with pytest.raises(SchemaFormatError, match=match):
        protobuf.schema_from_arrow(t)


def test_map_values_are_checked_as_fields_are():
    """An unknown enum name or a null without presence inside a map's values is a bad row."""
    codec = protobuf.codec('syntax = "proto3"; enum C { RED = 0; GREEN = 1; } message R { '
                           'map<string, C> colors = 1; map<string, I> items = 2; '
                           'message I { int32 k = 1; optional int32 o = 2; } }')
    full = {"colors": [("a", "GREEN")], "items": [("x", {"k": 1, "o": None})]}
    rows = [full, {**full, "colors": [("a", "PURPLE")]},
            {**full, "items": [("x", {"k": None, "o": 1})]}]
    res = codec.encode(pa.array(rows, codec.arrow_type))
    assert sorted(res.errors) == [1, 2]
    assert "'PURPLE' is not a value of enum C" in res.errors[1]
    assert "field 'items.value.k' is null" in res.errors[2]
    assert codec.decode(res.payloads.slice(0, 1)).values.to_pylist() == [full]
