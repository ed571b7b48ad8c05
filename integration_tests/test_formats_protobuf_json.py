"""Protobuf and JSON Schema in Confluent's wire format against a real Schema Registry and real Kafka
and Spark: txkafka reads what confluent_kafka's serializers wrote, and they read what txkafka
writes (Protobuf byte for byte); timestamp_ntz through each format's derived schema (Avro too)."""

from __future__ import annotations

import datetime as dt
import json

from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import message_factory

from txkafka.connector.serde import protobuf

PROTO = """
syntax = "proto3";
package shop.v1;
message Item { int64 id = 1; string name = 2; repeated int32 nums = 3; Part part = 4; }
message Part { string sku = 1; double weight = 2; }
"""
JSON_SCHEMA = {"type": "object", "properties": {
    "id": {"type": "integer"}, "name": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["id"]}


def _fmt_read(spark, kafka, topic: str, url: str, fmt: str):
    return (spark.read.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("valueFormat", fmt).option("schema.registry.url", url).load())


def _fmt_write(df, kafka, topic: str, url: str, fmt: str, subject: str) -> None:
    (df.write.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
     .option("topic", topic).option("valueFormat", fmt).option("schema.registry.url", url)
     .option("valueSubject", subject).mode("append").save())


def test_protobuf_both_ways_with_confluents_serializer(spark, kafka, schema_registry):
    src, dst = kafka.create_topic(), kafka.create_topic()
    client = SchemaRegistryClient({"url": schema_registry})
    Item = message_factory.GetMessageClass(protobuf.codec(PROTO).descriptor)
    ser = ProtobufSerializer(Item, client, {"use.deprecated.format": False})
    ctx = SerializationContext(src, MessageField.VALUE)
    items = [Item(id=i, name=f"n{i}", nums=list(range(i % 4)),
                  part={"sku": f"s{i}", "weight": i / 4}) for i in range(40)]
    framed = [ser(m, ctx) for m in items]
    kafka.produce(src, [(str(m.id).encode(), v) for m, v in zip(items, framed)])

    df = _fmt_read(spark, kafka, src, schema_registry, "protobuf")
    got = {r.value.id: r.value for r in df.select("value").collect()}
    assert len(got) == 40
    assert got[7].name == "n7" and list(got[7].nums) == [0, 1, 2]
    assert got[7].part.sku == "s7" and got[7].part.weight == 1.75

    _fmt_write(df.select("key", "value"), kafka, dst, schema_registry, "protobuf", f"{src}-value")
    out = {r.key: r.value for r in kafka.read_all(dst)}
    for m, v in zip(items, framed):
        assert out[str(m.id).encode()] == v  # byte for byte: schema id, message indexes, body
    de = ProtobufDeserializer(Item, {"use.deprecated.format": False})
    assert de(out[b"7"], SerializationContext(dst, MessageField.VALUE)) == items[7]


def test_json_schema_both_ways_with_confluents_serializer(spark, kafka, schema_registry):
    src, dst = kafka.create_topic(), kafka.create_topic()
    client = SchemaRegistryClient({"url": schema_registry})
    ser = JSONSerializer(json.dumps(JSON_SCHEMA), client)
    ctx = SerializationContext(src, MessageField.VALUE)
    docs = [{"id": i, "name": f"n{i}", "tags": [f"t{j}" for j in range(i % 3)]} for i in range(30)]
    kafka.produce(src, [(str(d["id"]).encode(), ser(d, ctx)) for d in docs])

    df = _fmt_read(spark, kafka, src, schema_registry, "json-schema")
    got = sorted((r.value.asDict() for r in df.select("value").collect()), key=lambda d: d["id"])
    assert got == docs

    _fmt_write(df.select("key", "value"), kafka, dst, schema_registry, "json-schema",
               f"{src}-value")
    de = JSONDeserializer(json.dumps(JSON_SCHEMA))
    dctx = SerializationContext(dst, MessageField.VALUE)
    back = sorted((de(r.value, dctx) for r in kafka.read_all(dst)), key=lambda d: d["id"])
    assert back == docs


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _auto_write(df, kafka, topic: str, url: str, fmt: str, register: bool = True) -> None:
    (df.write.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
     .option("topic", topic).option("valueFormat", fmt).option("schema.registry.url", url)
     .option("auto.register.schemas", str(register).lower())
     .option("use.latest.version", "false").option("valueRecordName", "Item")
     .option("valueRecordNamespace", "shop").mode("append").save())


def test_auto_register_derives_protobuf_and_json_schemas(spark, kafka, schema_registry):
    """The DataFrame's struct registered as a proto3 message and as a JSON Schema (twice: the
    same schema keeps its id and version), read back by confluent_kafka and by txkafka."""
    pb_topic, js_topic = kafka.create_topic(), kafka.create_topic()
    df = spark.createDataFrame(
        [(i, None if i % 3 == 0 else f"n{i}", [f"t{j}" for j in range(i % 3)], i * 0.5)
         for i in range(20)],
        "id bigint not null, name string, tags array<string>, w double")
    # ts: a well-known type import (google/protobuf/timestamp.proto) the registry must accept.
    df = df.selectExpr("CAST(id AS STRING) AS key",
                       "named_struct('id', id, 'name', name, 'tags', tags, "
                       "'part', named_struct('w', w), "
                       "'ts', IF(id % 4 = 0, NULL, timestamp_micros(id * 1000001))) AS value")
    expected = {r.value.id: r.value.asDict(recursive=True) for r in df.select("value").collect()}
    assert expected[4]["name"] == "n4" and expected[4]["ts"] is None and len(expected) == 20
    client = SchemaRegistryClient({"url": schema_registry})
    for topic, fmt in ((pb_topic, "protobuf"), (js_topic, "json-schema")):
        _auto_write(df, kafka, topic, schema_registry, fmt)
        _auto_write(df.limit(1), kafka, topic, schema_registry, fmt)  # registered again: no-op
        # Neither registered nor the latest: the derived schema is looked up, and found.
        _auto_write(df.limit(1), kafka, topic, schema_registry, fmt, register=False)
        assert client.get_versions(f"{topic}-value") == [1]
        back = _fmt_read(spark, kafka, topic, schema_registry, fmt).select("value").collect()
        assert len(back) == 22
        assert {r.value.id: r.value.asDict(recursive=True) for r in back} == expected

    latest = client.get_latest_version(f"{pb_topic}-value").schema.schema_str
    assert "message Item" in latest and "optional string name = 2;" in latest
    Item = message_factory.GetMessageClass(protobuf.codec(latest).descriptor)
    de = ProtobufDeserializer(Item, {"use.deprecated.format": False})
    ctx = SerializationContext(pb_topic, MessageField.VALUE)
    for r in kafka.read_all(pb_topic):
        m = de(r.value, ctx)
        want = expected[m.id]
        assert m.HasField("name") == (want["name"] is not None)  # proto3 optional: null kept
        assert (m.name if m.HasField("name") else None, list(m.tags), m.part.w) == (
            want["name"], want["tags"], want["part"]["w"])
        assert m.HasField("ts") == (m.id % 4 != 0)
        assert not m.HasField("ts") or m.ts.ToMicroseconds() == m.id * 1000001

    doc = json.loads(client.get_latest_version(f"{js_topic}-value").schema.schema_str)
    assert doc["title"] == "shop.Item" and doc["required"] == ["id", "part"]  # not nullable
    jde = JSONDeserializer(json.dumps(doc))
    jctx = SerializationContext(js_topic, MessageField.VALUE)
    for r in kafka.read_all(js_topic):
        d = jde(r.value, jctx)
        want = expected[d["id"]]
        ts = d.pop("ts", None)
        assert (ts is None) == (d["id"] % 4 == 0)  # null properties are left out
        assert ts is None or dt.datetime.fromisoformat(ts) == _EPOCH + dt.timedelta(
            microseconds=d["id"] * 1000001)
        assert {"name": None, **d} == {k: v for k, v in want.items() if k != "ts"}


COMMON = """
syntax = "proto3";
package shop.v1;
message Address { string street = 1; int32 zip = 2; }
"""
CUSTOMER = """
syntax = "proto3";
package shop.v1;
import "shop/common.proto";
message Customer { int64 id = 1; Address home = 2; repeated Address others = 3; }
"""


def _framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def test_protobuf_import_of_another_registered_file(spark, kafka, schema_registry):
    """A .proto importing another registered file (a reference named by its import path):
    read, and written with the pinned subject, as confluent_kafka frames it."""
    src, dst = kafka.create_topic(), kafka.create_topic()
    client = SchemaRegistryClient({"url": schema_registry})
    client.register_schema(f"{src}-common", Schema(COMMON, "PROTOBUF"))
    refs = [SchemaReference("shop/common.proto", f"{src}-common", 1)]
    sid = client.register_schema(f"{src}-value", Schema(CUSTOMER, "PROTOBUF", refs))
    Customer = message_factory.GetMessageClass(
        protobuf.codec(CUSTOMER, {"shop/common.proto": COMMON}).descriptor)
    msgs = [Customer(id=i, home={"street": f"s{i}", "zip": i},
                     others=[{"street": "o", "zip": j} for j in range(i % 3)]) for i in range(20)]
    framed = [_framed(sid, b"\x00" + m.SerializeToString()) for m in msgs]
    kafka.produce(src, [(str(m.id).encode(), v) for m, v in zip(msgs, framed)])

    df = _fmt_read(spark, kafka, src, schema_registry, "protobuf")
    got = {r.value.id: r.value.asDict(recursive=True) for r in df.select("value").collect()}
    assert got[7] == {"id": 7, "home": {"street": "s7", "zip": 7},
                      "others": [{"street": "o", "zip": 0}]} and len(got) == 20
    _fmt_write(df.select("key", "value"), kafka, dst, schema_registry, "protobuf", f"{src}-value")
    out = {r.key: r.value for r in kafka.read_all(dst)}
    assert [out[str(m.id).encode()] for m in msgs] == framed
    de = ProtobufDeserializer(Customer, {"use.deprecated.format": False})
    assert de(out[b"5"], SerializationContext(dst, MessageField.VALUE)) == msgs[5]


ADDRESS_JSON = {"type": "object", "properties": {"street": {"type": "string"},
                                                 "zip": {"type": "integer"}},
                "required": ["street"]}
CUSTOMER_JSON = {"type": "object", "properties": {
    "id": {"type": "integer"}, "home": {"$ref": "address.json"},
    "others": {"type": "array", "items": {"$ref": "address.json"}}}, "required": ["id"]}


def test_json_schema_ref_to_another_subject(spark, kafka, schema_registry):
    """A JSON Schema whose $ref names a document registered in another subject."""
    src, dst = kafka.create_topic(), kafka.create_topic()
    client = SchemaRegistryClient({"url": schema_registry})
    client.register_schema(f"{src}-address", Schema(json.dumps(ADDRESS_JSON), "JSON"))
    refs = [SchemaReference("address.json", f"{src}-address", 1)]
    schema = Schema(json.dumps(CUSTOMER_JSON), "JSON", refs)
    client.register_schema(f"{src}-value", schema)
    ser = JSONSerializer(schema, client, conf={"auto.register.schemas": False,
                                               "use.latest.version": True})
    docs = [{"id": i, "home": {"street": f"s{i}", "zip": i},
             "others": [{"street": "o", "zip": j} for j in range(i % 3)]} for i in range(20)]
    ctx = SerializationContext(src, MessageField.VALUE)
    kafka.produce(src, [(str(d["id"]).encode(), ser(d, ctx)) for d in docs])

    df = _fmt_read(spark, kafka, src, schema_registry, "json-schema")
    got = sorted((r.value.asDict(recursive=True) for r in df.select("value").collect()),
                 key=lambda d: d["id"])
    assert got == docs
    _fmt_write(df.select("key", "value"), kafka, dst, schema_registry, "json-schema",
               f"{src}-value")
    de = JSONDeserializer(schema, schema_registry_client=client)
    dctx = SerializationContext(dst, MessageField.VALUE)
    back = sorted((de(r.value, dctx) for r in kafka.read_all(dst)), key=lambda d: d["id"])
    assert back == docs


def test_timestamp_ntz_round_trips_where_the_format_has_a_local_date_time(spark, kafka,
                                                                          schema_registry):
    """timestamp_ntz written with a derived, auto-registered schema and read back: Avro
    (local-timestamp-micros) and JSON Schema (format datetime-local) keep timestamp_ntz, the
    wall-clock time unchanged; Protobuf has only the instant Timestamp, so the wall-clock time
    is written as UTC and reads back as a timestamp. confluent_kafka reads what was written
    (its JSON deserializer validating each document against the registered schema)."""
    df = spark.range(12).selectExpr(
        "CAST(id AS STRING) AS key",
        "named_struct('id', id, 'local', IF(id % 4 = 0, NULL, make_timestamp_ntz(2024, 3, 31, 2, "
        "30, CAST(id + 0.123456 AS DECIMAL(8, 6)))), 'at', timestamp_micros(id * 1000001)) "
        "AS value")
    wall = {i: None if i % 4 == 0 else dt.datetime(2024, 3, 31, 2, 30, i, 123456)
            for i in range(12)}
    utc_micros = {i: w and (w - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
                  for i, w in wall.items()}
    client = SchemaRegistryClient({"url": schema_registry})
    for fmt, local_type in (("avro", "timestamp_ntz"), ("json-schema", "timestamp_ntz"),
                            ("protobuf", "timestamp")):
        topic = kafka.create_topic()
        _auto_write(df, kafka, topic, schema_registry, fmt)
        back = _fmt_read(spark, kafka, topic, schema_registry, fmt)
        assert back.schema["value"].dataType.simpleString() == (
            f"struct<id:bigint,local:{local_type},at:timestamp>"), fmt
        local = "value.local" if local_type == "timestamp_ntz" else "unix_micros(value.local)"
        got = {r[0]: (r[1], r[2]) for r in back.selectExpr(
            "value.id", local, "unix_micros(value.at)").collect()}
        want = wall if local_type == "timestamp_ntz" else utc_micros
        assert got == {i: (want[i], i * 1000001) for i in range(12)}, fmt

        ctx = SerializationContext(topic, MessageField.VALUE)
        records = kafka.read_all(topic)
        if fmt == "avro":
            theirs = {d["id"]: d["local"] for d in (
                AvroDeserializer(client)(r.value, ctx) for r in records)}
            assert theirs == wall  # a naive datetime: local-timestamp-micros
        elif fmt == "json-schema":
            text = client.get_latest_version(f"{topic}-value").schema.schema_str
            assert json.loads(text)["properties"]["local"]["format"] == "datetime-local"
            docs = [JSONDeserializer(text)(r.value, ctx) for r in records]
            assert {d["id"]: d.get("local") for d in docs} == {
                i: w and w.isoformat() for i, w in wall.items()}
        else:
            text = client.get_latest_version(f"{topic}-value").schema.schema_str
            Item = message_factory.GetMessageClass(protobuf.codec(text).descriptor)
            de = ProtobufDeserializer(Item, {"use.deprecated.format": False})
            msgs = [de(r.value, ctx) for r in records]
            assert {m.id: m.local.ToMicroseconds() if m.HasField("local") else None
                    for m in msgs} == utc_micros
