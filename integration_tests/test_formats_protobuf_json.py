"""Protobuf and JSON Schema in Confluent's wire format against a real Schema Registry and real Kafka
and Spark: txkafka reads what confluent_kafka's serializers wrote, and they read what txkafka
writes (Protobuf byte for byte)."""

from __future__ import annotations

import json

from confluent_kafka.schema_registry import SchemaRegistryClient
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
