"""Avro in Confluent's wire format against a real Schema Registry (Apicurio, Confluent API) and real
Kafka and Spark: txkafka's reader and writer, cross-checked with confluent_kafka's own serializers;
schema evolution; FAILFAST and PERMISSIVE; an exactly-once Avro -> txkafka -> Avro pipeline across
a driver kill."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from integration_tests.pipeline_helpers import (PipelineTopics, assert_exactly_once,
                                                pipeline_args, run_pipeline)
from txkafka.connector.errors import RecordFormatError

ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
# v2: a field added with a default, a field removed (BACKWARD-compatible: v2 reads v1's records).
ORDER_V2 = {**ORDER_V1, "fields": [f for f in ORDER_V1["fields"] if f["name"] != "note"]
            + [{"name": "channel", "type": "string", "default": "web"}]}


def _order(i: int) -> dict:
    return {"id": i, "customer": f"c{i % 7}", "amount": i * 1.25,
            "note": None if i % 3 else f"n{i}", "tags": [f"t{j}" for j in range(i % 3)]}


def _client(url: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url})


def _serializer(url: str, schema: dict, **conf) -> AvroSerializer:
    return AvroSerializer(_client(url), json.dumps(schema), conf={"auto.register.schemas": True,
                                                                  **conf})


def _produce_avro(kafka, topic: str, url: str, schema: dict, rows: list[dict],
                  transactional: bool = False, commit: bool = True) -> list[bytes]:
    ser = _serializer(url, schema)
    ctx = SerializationContext(topic, MessageField.VALUE)
    values = [ser(r, ctx) for r in rows]
    kafka.produce(topic, [(str(r["id"]).encode(), v) for r, v in zip(rows, values)],
                  transactional=transactional, commit=commit)
    return values


def _read(spark, kafka, topic: str, url: str, **options):
    return (spark.read.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("valueFormat", "avro").option("schema.registry.url", url)
            .options(**options).load())


def test_read_and_write_match_confluents_serializers(spark, kafka, schema_registry):
    """txkafka reads what AvroSerializer wrote, and writes the same bytes it would."""
    src, dst = kafka.create_topic(), kafka.create_topic()
    rows = [_order(i) for i in range(50)]
    written = _produce_avro(kafka, src, schema_registry, ORDER_V1, rows)

    df = _read(spark, kafka, src, schema_registry)
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,customer:string,amount:double,note:string,tags:array<string>>")
    got = sorted((r.value.asDict() for r in df.select("value").collect()), key=lambda d: d["id"])
    assert got == rows

    # Written back with the subject's latest schema (the source subject's, pinned by subject).
    (df.select("key", "value").write.format("txkafka")
     .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", dst)
     .option("valueFormat", "avro").option("schema.registry.url", schema_registry)
     .option("valueSubject", f"{src}-value").mode("append").save())
    out = kafka.read_all(dst)
    by_key = {r.key: r.value for r in out}
    assert len(out) == len(rows)
    for r, v in zip(rows, written):
        assert by_key[str(r["id"]).encode()] == v  # byte for byte: the same schema id and body
    de = AvroDeserializer(_client(schema_registry))
    ctx = SerializationContext(dst, MessageField.VALUE)
    assert sorted((de(r.value, ctx) for r in out), key=lambda d: d["id"]) == rows


def test_auto_register_derives_the_schema_from_the_dataframe(spark, kafka, schema_registry):
    dst = kafka.create_topic()
    df = spark.createDataFrame([(f"k{i}", i, f"name{i}") for i in range(20)], "k string, n int, s string")
    (df.selectExpr("CAST(k AS BINARY) AS key", "struct(n, s) AS value").write.format("txkafka")
     .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", dst)
     .option("valueFormat", "avro").option("schema.registry.url", schema_registry)
     .option("auto.register.schemas", "true").option("valueRecordName", "Item")
     .option("valueRecordNamespace", "test").mode("append").save())
    latest = _client(schema_registry).get_latest_version(f"{dst}-value")
    assert json.loads(latest.schema.schema_str)["name"] == "Item"
    de = AvroDeserializer(_client(schema_registry))
    ctx = SerializationContext(dst, MessageField.VALUE)
    got = sorted((de(r.value, ctx) for r in kafka.read_all(dst)), key=lambda d: d["n"])
    assert got == [{"n": i, "s": f"name{i}"} for i in range(20)]
    back = _read(spark, kafka, dst, schema_registry).select("value.n", "value.s").collect()
    assert sorted((r.n, r.s) for r in back) == [(i, f"name{i}") for i in range(20)]


KEY = {"type": "record", "name": "OrderKey", "namespace": "shop",
       "fields": [{"name": "id", "type": "long"}, {"name": "region", "type": "string"}]}


def test_key_format_alone_reads_and_writes_with_the_topics_key_subject(spark, kafka,
                                                                        schema_registry):
    """keyFormat only: the key is Avro under subject <topic>-key, the value stays binary."""
    src, dst = kafka.create_topic(), kafka.create_topic()
    ser = _serializer(schema_registry, KEY)
    keys = [{"id": i, "region": f"r{i % 4}"} for i in range(25)]
    framed = [ser(k, SerializationContext(src, MessageField.KEY)) for k in keys]
    kafka.produce(src, [(k, f"v{i}".encode()) for i, k in enumerate(framed)])

    df = (spark.read.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest")
          .option("keyFormat", "avro").option("schema.registry.url", schema_registry).load())
    assert df.schema["key"].dataType.simpleString() == "struct<id:bigint,region:string>"
    assert df.schema["value"].dataType.simpleString() == "binary"
    got = {r.key.id: (r.key.region, r.value) for r in df.select("key", "value").collect()}
    assert got == {k["id"]: (k["region"], f"v{k['id']}".encode()) for k in keys}

    (df.select("key", "value").write.format("txkafka")
     .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", dst)
     .option("keyFormat", "avro").option("schema.registry.url", schema_registry)
     .option("auto.register.schemas", "true").option("keyRecordName", "OrderKey")
     .option("keyRecordNamespace", "shop").mode("append").save())
    assert _client(schema_registry).get_versions(f"{dst}-key") == [1]
    de = AvroDeserializer(_client(schema_registry))
    ctx = SerializationContext(dst, MessageField.KEY)
    out = {de(r.key, ctx)["id"]: (de(r.key, ctx), r.value) for r in kafka.read_all(dst)}
    assert out == {k["id"]: (k, f"v{k['id']}".encode()) for k in keys}


ZIP = {"type": "fixed", "name": "Zip", "namespace": "shop", "size": 5}
ADDRESS = {"type": "record", "name": "Address", "namespace": "shop",
           "fields": [{"name": "street", "type": "string"}, {"name": "zip", "type": "shop.Zip"}]}
CUSTOMER = {"type": "record", "name": "Customer", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "home", "type": "shop.Address"},
    {"name": "work", "type": ["null", "shop.Address"], "default": None}]}


def test_schema_references_to_another_subject_read_and_written(spark, kafka, schema_registry):
    """A schema whose named type is registered in another subject (a reference): read, and
    written with the pinned subject, byte for byte as confluent_kafka's serializer writes."""
    src, dst = kafka.create_topic(), kafka.create_topic()
    client = _client(schema_registry)
    # Customer -> Address -> Zip: the references' own references are followed too.
    client.register_schema(f"{src}-zip", Schema(json.dumps(ZIP), "AVRO"))
    client.register_schema(f"{src}-address", Schema(json.dumps(ADDRESS), "AVRO", [
        SchemaReference("shop.Zip", f"{src}-zip", 1)]))
    refs = [SchemaReference("shop.Address", f"{src}-address", 1)]
    client.register_schema(f"{src}-value", Schema(json.dumps(CUSTOMER), "AVRO", refs))
    rows = [{"id": i, "home": {"street": f"s{i}", "zip": f"{i:05}".encode()},
             "work": None if i % 2 else {"street": "w", "zip": b"00007"}} for i in range(20)]
    ser = AvroSerializer(client, Schema(json.dumps(CUSTOMER), "AVRO", refs),
                         conf={"auto.register.schemas": False, "use.latest.version": True})
    written = [ser(r, SerializationContext(src, MessageField.VALUE)) for r in rows]
    kafka.produce(src, [(str(r["id"]).encode(), v) for r, v in zip(rows, written)])

    df = _read(spark, kafka, src, schema_registry)
    got = sorted((r.value.asDict(recursive=True) for r in df.select("value").collect()),
                 key=lambda d: d["id"])
    assert got == rows
    (df.select("key", "value").write.format("txkafka")
     .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", dst)
     .option("valueFormat", "avro").option("schema.registry.url", schema_registry)
     .option("valueSubject", f"{src}-value").mode("append").save())
    out = {r.key: r.value for r in kafka.read_all(dst)}
    assert [out[str(r["id"]).encode()] for r in rows] == written
    de = AvroDeserializer(client)
    assert de(out[b"4"], SerializationContext(dst, MessageField.VALUE)) == rows[4]


def test_evolution_reads_every_version_with_the_latest_schema(spark, kafka, schema_registry):
    """v1 records, then v2 records (a field added with a default, one removed), read with v2."""
    topic = kafka.create_topic()
    v1_rows = [_order(i) for i in range(30)]
    _produce_avro(kafka, topic, schema_registry, ORDER_V1, v1_rows)
    v2_rows = [{k: v for k, v in _order(i).items() if k != "note"} | {"channel": f"app{i}"}
               for i in range(30, 60)]
    _produce_avro(kafka, topic, schema_registry, ORDER_V2, v2_rows)
    assert _client(schema_registry).get_versions(f"{topic}-value") == [1, 2]

    df = _read(spark, kafka, topic, schema_registry)
    assert [f.name for f in df.schema["value"].dataType.fields] == [
        "id", "customer", "amount", "tags", "channel"]
    got = {r.value.id: r.value.asDict() for r in df.select("value").collect()}
    expected = {r["id"]: {k: v for k, v in r.items() if k != "note"} | {"channel": "web"}
                for r in v1_rows}
    expected.update({r["id"]: r for r in v2_rows})
    assert got == expected
    # Pinned to v1: v2's records resolved back (channel dropped, note from its default).
    old = _read(spark, kafka, topic, schema_registry, valueSchemaVersion="1")
    got_v1 = {r.value.id: r.value.asDict() for r in old.select("value").collect()}
    assert got_v1[45] == {k: v for k, v in _order(45).items()} | {"note": None}


BUYER_V1 = {"type": "record", "name": "Buyer", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
# v2 of the referenced type: a field added with a default.
BUYER_V2 = {**BUYER_V1, "fields": BUYER_V1["fields"] + [
    {"name": "tier", "type": "string", "default": "basic"}]}
PURCHASE_V1 = {"type": "record", "name": "Purchase", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "buyer", "type": "shop.Buyer"},
    {"name": "payer", "type": ["null", "shop.Buyer"], "default": None},
    {"name": "others", "type": {"type": "array", "items": "shop.Buyer"}}]}
# v2 of the referencing schema refers to Buyer v2, its own text the same or with a field added.
PURCHASE_V2 = {**PURCHASE_V1, "fields": PURCHASE_V1["fields"] + [
    {"name": "channel", "type": "string", "default": "web"}]}


def _purchase(i: int, v2: bool, channel: bool) -> dict:
    def buyer(n: int) -> dict:
        return {"id": n, "name": f"b{n}"} | ({"tier": f"t{n % 3}"} if v2 else {})

    row = {"id": i, "buyer": buyer(i), "payer": None if i % 2 else buyer(i + 1000),
           "others": [buyer(i * 10 + j) for j in range(i % 3)]}
    return row | ({"channel": f"app{i}"} if channel else {})


@pytest.mark.parametrize("adds_field", [False, True], ids=["same-text", "field-added"])
def test_evolution_of_a_referenced_schema_reads_every_version_with_the_latest(
        spark, kafka, schema_registry, adds_field):
    """A value schema referencing another subject's record (Purchase -> Buyer), evolved:
    Buyer v2 adds a field with a default; Purchase v2 refers to Buyer v2 (with its own text
    unchanged, or a field added). v1 records written by confluent_kafka's serializer and v2
    records by txkafka's writer in one topic, read with the latest (every record resolved by
    Avro's rules, the referenced type's too) and with v1."""
    topic = kafka.create_topic()
    client = _client(schema_registry)
    buyer_subject, value_subject = f"{topic}-buyer", f"{topic}-value"
    client.register_schema(buyer_subject, Schema(json.dumps(BUYER_V1), "AVRO"))
    v1 = Schema(json.dumps(PURCHASE_V1), "AVRO",
                [SchemaReference("shop.Buyer", buyer_subject, 1)])
    client.register_schema(value_subject, v1)
    ser = AvroSerializer(client, v1, conf={"auto.register.schemas": False,
                                           "use.latest.version": True})
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1_rows = [_purchase(i, v2=False, channel=False) for i in range(20)]
    kafka.produce(topic, [(str(r["id"]).encode(), ser(r, ctx)) for r in v1_rows])

    client.register_schema(buyer_subject, Schema(json.dumps(BUYER_V2), "AVRO"))
    purchase_v2 = PURCHASE_V2 if adds_field else PURCHASE_V1
    client.register_schema(value_subject, Schema(json.dumps(purchase_v2), "AVRO", [
        SchemaReference("shop.Buyer", buyer_subject, 2)]))
    assert client.get_versions(buyer_subject) == [1, 2]
    assert client.get_versions(value_subject) == [1, 2]
    v2_rows = [_purchase(i, v2=True, channel=adds_field) for i in range(20, 40)]
    channel = ",channel:string" if adds_field else ""
    buyer_ddl = "struct<id:bigint,name:string,tier:string>"
    v2_df = spark.createDataFrame(
        [(str(r["id"]), r) for r in v2_rows],
        f"key string, value struct<id:bigint,buyer:{buyer_ddl},payer:{buyer_ddl},"
        f"others:array<{buyer_ddl}>{channel}>")
    (v2_df.write.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
     .option("topic", topic).option("valueFormat", "avro")
     .option("schema.registry.url", schema_registry).mode("append").save())

    def upgraded(b: dict | None) -> dict | None:
        return b and b | {"tier": "basic"}

    latest = {r["id"]: {**r, "buyer": upgraded(r["buyer"]), "payer": upgraded(r["payer"]),
                        "others": [upgraded(b) for b in r["others"]]}
              | ({"channel": "web"} if adds_field else {}) for r in v1_rows}
    latest.update({r["id"]: r for r in v2_rows})
    df = _read(spark, kafka, topic, schema_registry)
    assert df.schema["value"].dataType.simpleString() == (
        f"struct<id:bigint,buyer:{buyer_ddl},payer:{buyer_ddl},others:array<{buyer_ddl}>"
        f"{channel}>")
    got = {r.value.id: r.value.asDict(recursive=True) for r in df.select("value").collect()}
    assert got == latest
    # confluent_kafka reads txkafka's v2 records with the schema (and reference) they name.
    de = AvroDeserializer(client)
    theirs = {d["id"]: d for d in (de(r.value, ctx) for r in kafka.read_all(topic))}
    assert theirs == {r["id"]: r for r in v1_rows} | {r["id"]: r for r in v2_rows}

    def downgraded(b: dict | None) -> dict | None:
        return b and {k: v for k, v in b.items() if k != "tier"}

    old = _read(spark, kafka, topic, schema_registry, valueSchemaVersion="1")
    got_v1 = {r.value.id: r.value.asDict(recursive=True) for r in old.select("value").collect()}
    assert got_v1 == {r["id"]: r for r in v1_rows} | {
        r["id"]: {"id": r["id"], "buyer": downgraded(r["buyer"]), "payer": downgraded(r["payer"]),
                  "others": [downgraded(b) for b in r["others"]]} for r in v2_rows}


def test_failfast_names_the_record_and_permissive_keeps_it(spark, kafka, schema_registry):
    topic = kafka.create_topic()
    _produce_avro(kafka, topic, schema_registry, ORDER_V1, [_order(0)])
    kafka.produce(topic, [(b"plain", b"not avro"), (b"unknown-id", b"\x00\x00\x0f\x42\x40\x02"),
                          (b"truncated", b"\x00\x00\x00\x00\x01\x02")])
    # the registry assigned ORDER_V1's id; a payload cut short under that id:
    sid = _client(schema_registry).get_latest_version(f"{topic}-value").schema_id
    kafka.produce(topic, [(b"short", b"\x00" + sid.to_bytes(4, "big") + b"\x04")])
    kafka.produce(topic, [(b"tombstone", None)])

    with pytest.raises(Exception) as failed:
        _read(spark, kafka, topic, schema_registry).collect()
    text = str(failed.value)
    assert RecordFormatError.__name__ in text
    assert f"topic '{topic}' partition 0 offset 1: no magic byte" in text

    rows = {r.key: r for r in _read(spark, kafka, topic, schema_registry,
                                    mode="PERMISSIVE").collect()}
    assert rows[b"0"].value.id == 0 and rows[b"0"].valueError is None
    assert rows[b"plain"].value is None and rows[b"plain"].valueRaw == b"not avro"
    assert "no magic byte" in rows[b"plain"].valueError
    assert "unknown schema id 1000000" in rows[b"unknown-id"].valueError
    assert rows[b"short"].value is None and "does not decode" in rows[b"short"].valueError
    assert rows[b"tombstone"].value is None and rows[b"tombstone"].valueError is None


def test_exactly_once_avro_pipeline_across_a_driver_kill(kafka, schema_registry, driver_processes,
                                                         tmp_path):
    """Avro -> txkafka -> Avro, the driver SIGKILLed mid-run: exact (no duplicate, no gap)."""
    src, dst = kafka.create_topic(partitions=2), kafka.create_topic(partitions=2)
    committed = 0
    for n in range(6):  # one transaction in three aborted
        abort = n % 3 == 2
        rows = [_order(n * 100 + i) for i in range(100)]
        _produce_avro(kafka, src, schema_registry, ORDER_V1, rows, transactional=True,
                      commit=not abort)
        committed += 0 if abort else len(rows)
    topics = PipelineTopics(src, dst, committed)
    ck = str(tmp_path / "ck")
    formats = ["--mode", "passthrough", "--max-offsets", "150",
               "--format-conf", "valueFormat=avro",
               "--format-conf", f"schema.registry.url={schema_registry}",
               "--format-conf", "auto.register.schemas=true"]
    marker = tmp_path / "kill.marker"
    fault = f"point=between_endtxn,batch=2,action=kill,once={marker}"
    code, proc = run_pipeline(driver_processes, pipeline_args(kafka, topics, ck, *formats,
                                                              "--fault", fault))
    assert marker.exists() and code == -9, proc.tail()
    code, proc = run_pipeline(driver_processes, pipeline_args(kafka, topics, ck, *formats))
    assert code == 0, proc.tail()
    assert_exactly_once(kafka, topics, ck)
    de = AvroDeserializer(_client(schema_registry))
    ctx = SerializationContext(dst, MessageField.VALUE)
    values = {de(r.value, ctx)["id"] for r in kafka.read_all(dst)}
    assert len(values) == committed
