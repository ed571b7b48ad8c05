"""The wire header column-wise, the format options, the registry client's errors and the decoding
of framed batches (FAILFAST, PERMISSIVE, rows put back in order): what needs no registry server
(the integration tests run the rest against a real one)."""

from __future__ import annotations

import json
import socket

import numpy as np
import pyarrow as pa
import pytest

from txkafka.connector.errors import KafkaConfigError, RecordFormatError, SchemaRegistryError
from txkafka.connector.serde import avro
from txkafka.connector.serde.batches import (ColumnPlan, DecodePlan, EncodePlan, _in_row_order,
                                             coalesced, decode_record_batch, decoded_schema,
                                             encode_record_batches)
from txkafka.connector.serde.options import RegistryConfig, parse_format_options
from txkafka.connector.serde.registry import RegisteredSchema, Registry
from txkafka.connector.serde.wire import frame_column, split_column
from txkafka.connector.source.range_reader import SCHEMA

SCHEMA_TEXT = json.dumps({"type": "record", "name": "R", "fields": [
    {"name": "a", "type": "int"}, {"name": "s", "type": "string"}]})


def test_split_reads_every_header_and_names_bad_rows():
    framed = frame_column(258, pa.array([b"abc", b"", b"xyz"]))
    col = pa.concat_arrays([framed, pa.array([None, b"\x01\x00\x00\x00\x01x", b"\x00\x00"],
                                             pa.binary())])
    split = split_column(col.slice(0))
    assert split.ids.tolist() == [258, 258, 258, -1, -1, -1]
    assert split.payloads.to_pylist() == [b"abc", b"", b"xyz", None, None, None]
    assert split.nulls.tolist() == [False, False, False, True, False, False]
    assert set(split.bad) == {4, 5}
    assert "no magic byte" in split.bad[4] and "no wire-format header" in split.bad[5]
    sliced = split_column(col.slice(2, 3))  # a slice: offsets relative to its own start
    assert sliced.ids.tolist() == [258, -1, -1] and sliced.payloads.to_pylist() == [b"xyz", None, None]


def test_frame_keeps_nulls_and_prepends_the_id_big_endian():
    assert frame_column(0x01020304, pa.array([b"p", None])).to_pylist() == [
        b"\x00\x01\x02\x03\x04p", None]


def test_rows_put_back_in_order():
    groups = [(np.array([3, 0]), pa.array([30, 0])), (np.array([1]), pa.array([10]))]
    assert _in_row_order(groups, 4, pa.int64()).to_pylist() == [0, 10, None, 30]


def _opts(**kv):
    return {k.lower(): v for k, v in kv.items()}


def test_format_options_are_parsed_once_with_clear_errors():
    f = parse_format_options(_opts(valueFormat="AVRO", **{"schema.registry.url": "http://r:8081",
                                                          "schema.registry.basic.auth.user.info": "u:p",
                                                          "value.subject.name.strategy":
                                                              "recordnamestrategy"}))
    assert f.value.format == "avro" and f.key is None and f.mode == "FAILFAST"
    assert f.value.strategy == "RecordNameStrategy" and f.use_latest_version
    assert "u:p" not in repr(f)
    assert parse_format_options(_opts(topic="t")) is None
    for bad, message in [
        (_opts(valueFormat="avro"), "need option 'schema.registry.url'"),
        (_opts(valueFormat="xml", **{"schema.registry.url": "u"}), "one of avro, protobuf"),
        (_opts(valueSchemaId="3"), "needs option 'valueFormat'"),
        (_opts(mode="PERMISSIVE"), "neither is set"),
        (_opts(valueFormat="avro", mode="lenient", **{"schema.registry.url": "u"}), "FAILFAST"),
        (_opts(valueFormat="avro", valueSchemaId="3", valueSchemaVersion="2",
               **{"schema.registry.url": "u"}), "pins the schema by id"),
        (_opts(valueFormat="avro", **{"schema.registry.url": "u", "schema.registry.urls": "x"}),
         "not a Schema Registry client setting"),
        (_opts(valueFormat="avro", **{"schema.registry.url": "u", "auto.register.schemas": "true",
                                      "use.latest.version": "true"}), "choose one"),
    ]:
        with pytest.raises(KafkaConfigError, match=message):
            parse_format_options(bad)


def test_subject_names_follow_the_strategies():
    f = parse_format_options(_opts(valueFormat="avro", keyFormat="avro",
                                   **{"schema.registry.url": "u",
                                      "key.subject.name.strategy": "TopicRecordNameStrategy"}))
    assert f.value.subject_for("orders", "shop.Order") == "orders-value"
    assert f.key.subject_for("orders", "shop.Order") == "orders-shop.Order"
    with pytest.raises(KafkaConfigError, match="valueSubject"):
        f.value.subject_for(None, None)


def test_an_unreachable_registry_fails_after_bounded_retries_naming_the_url_only():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    reg = Registry(RegistryConfig(f"http://alice:s3cret@127.0.0.1:{port}",
                                  (("max.retries", "0"), ("retries.wait.ms", "1"))))
    with pytest.raises(SchemaRegistryError) as e:
        reg.by_id(7)
    text = str(e.value)
    assert f"127.0.0.1:{port}" in text and "schema id 7" in text and "after 3 attempts" in text
    assert "s3cret" not in text and "alice" not in text


def _plan(mode: str = "FAILFAST") -> DecodePlan:
    opts = parse_format_options(_opts(valueFormat="avro", mode=mode,
                                      **{"schema.registry.url": "http://127.0.0.1:9"}))
    return DecodePlan(opts, None, ColumnPlan(opts.value, RegisteredSchema(5, "AVRO", SCHEMA_TEXT)))


def _batch(values: list) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays([
        pa.nulls(n, pa.binary()), pa.array(values, pa.binary()), pa.array(["t"] * n),
        pa.array([2] * n, pa.int32()), pa.array(range(100, 100 + n), pa.int64()),
        pa.array([0] * n, pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32())],
        schema=SCHEMA)


def _framed(rows: list[dict]) -> list[bytes]:
    payloads = avro.codec(SCHEMA_TEXT).encode(pa.array(rows, avro.arrow_type(SCHEMA_TEXT))).payloads
    return frame_column(5, payloads).to_pylist()


def test_failfast_names_topic_partition_offset_and_the_fault():
    good = _framed([{"a": 1, "s": "x"}])
    with pytest.raises(RecordFormatError, match=r"topic 't' partition 2 offset 101: no magic byte"):
        decode_record_batch(_batch(good + [b"raw bytes"]), _plan(), "t", 2)
    with pytest.raises(RecordFormatError, match="offset 100: payload does not decode"):
        decode_record_batch(_batch([b"\x00\x00\x00\x00\x05\x02"]), _plan(), "t", 2)


def test_permissive_keeps_raw_bytes_and_the_error_beside_a_null_value():
    good = _framed([{"a": 1, "s": "x"}, {"a": 2, "s": "y"}])
    plan = _plan("PERMISSIVE")
    out = decode_record_batch(_batch([good[0], b"raw", None, good[1]]), plan, "t", 0)
    assert out.schema == decoded_schema(SCHEMA, plan)
    assert out.schema.names[-2:] == ["valueRaw", "valueError"]
    rows = out.to_pylist()
    assert [r["value"] for r in rows] == [{"a": 1, "s": "x"}, None, None, {"a": 2, "s": "y"}]
    assert [r["valueRaw"] for r in rows] == [None, b"raw", None, None]
    assert rows[1]["valueError"].startswith("no wire-format header")
    assert rows[2]["valueError"] is None  # a null value (tombstone) is not an error


def test_the_writers_plan_takes_timestamp_fields_of_a_struct(monkeypatch):
    """A struct with a timestamp field reaches the schema's resolution as Arrow (Spark's
    to_arrow_type needs a zone for it), nullability kept."""
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType

    from txkafka.python_datasource import formats as spark_formats

    seen = {}

    def resolve(options, fmt, topic, arrow_type):
        seen["type"] = arrow_type
        return RegisteredSchema(1, "PROTOBUF", "")

    monkeypatch.setattr(spark_formats, "resolve_writer_schema", resolve)
    opts = parse_format_options(_opts(valueFormat="protobuf",
                                      **{"schema.registry.url": "http://127.0.0.1:9",
                                         "auto.register.schemas": "true"}))
    value = StructType([StructField("id", LongType(), False), StructField("ts", TimestampType())])
    plan = spark_formats.encode_plan(opts, StructType([StructField("value", value)]), "t")
    assert plan.value.schema.schema_id == 1
    assert seen["type"] == pa.struct([pa.field("id", pa.int64(), False),
                                      pa.field("ts", pa.timestamp("us", "UTC"))])


NESTED_TEXT = json.dumps({"type": "record", "name": "N", "fields": [
    {"name": "a", "type": "int"},
    {"name": "xs", "type": {"type": "array", "items": "string"}}]})


def _value_batches(text: str, rows: list[dict], sizes: list[int]) -> list[pa.RecordBatch]:
    values = pa.array(rows, avro.arrow_type(text))
    keys = pa.array([f"k{i}".encode() for i in range(len(rows))], pa.binary())
    out, at = [], 0
    for n in sizes:
        out.append(pa.RecordBatch.from_arrays([keys.slice(at, n), values.slice(at, n)],
                                              ["key", "value"]))
        at += n
    return out


def _encode_plan(text: str) -> EncodePlan:
    opts = parse_format_options(_opts(valueFormat="avro",
                                      **{"schema.registry.url": "http://127.0.0.1:9"}))
    return EncodePlan(None, ColumnPlan(opts.value, RegisteredSchema(5, "AVRO", text)))


def test_nested_batches_are_joined_before_encoding_rows_and_order_kept():
    rows = [{"a": i, "xs": [str(j) for j in range(i % 4)]} for i in range(50)]
    batches = _value_batches(NESTED_TEXT, rows, [7, 0, 13, 30])
    out = list(encode_record_batches(iter(batches), _encode_plan(NESTED_TEXT), "t"))
    assert len(out) == 1  # Spark's small batches become one encode call
    whole = frame_column(5, avro.codec(NESTED_TEXT).encode(
        pa.array(rows, avro.arrow_type(NESTED_TEXT))).payloads)
    assert out[0].column(1).to_pylist() == whole.to_pylist()
    assert out[0].column(0).to_pylist() == [f"k{i}".encode() for i in range(50)]
    bounded = list(coalesced(iter(batches), rows=20))  # a bound closes a group before it
    assert [b.num_rows for b in bounded] == [20, 30]
    assert pa.Table.from_batches(bounded).to_pylist() == pa.Table.from_batches(batches).to_pylist()


def test_avro_joins_nested_batches_only_up_to_its_slice_bytes(monkeypatch):
    """Avro's encoder slices a column by bytes anyway: batches are joined up to its
    ``join_bytes``, a batch that would pass it starts the next group."""
    rows = [{"a": i, "xs": [str(j) for j in range(i % 4)]} for i in range(50)]
    batches = _value_batches(NESTED_TEXT, rows, [7, 0, 13, 30])
    monkeypatch.setattr(avro.AvroCodec, "join_bytes", sum(b.nbytes for b in batches[:3]))
    out = list(encode_record_batches(iter(batches), _encode_plan(NESTED_TEXT), "t"))
    assert [b.num_rows for b in out] == [20, 30]
    whole = frame_column(5, avro.codec(NESTED_TEXT).encode(
        pa.array(rows, avro.arrow_type(NESTED_TEXT))).payloads)
    assert pa.Table.from_batches(out).column(1).to_pylist() == whole.to_pylist()


def test_flat_batches_are_encoded_as_they_come():
    rows = [{"a": i, "s": str(i)} for i in range(10)]
    out = list(encode_record_batches(iter(_value_batches(SCHEMA_TEXT, rows, [4, 6])),
                                     _encode_plan(SCHEMA_TEXT), "t"))
    assert [b.num_rows for b in out] == [4, 6]
    assert list(encode_record_batches(iter([]), _encode_plan(SCHEMA_TEXT), "t")) == []


def test_a_value_that_does_not_fit_is_named_by_its_row_in_the_task_input():
    text = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},
                                                                 {"name": "s", "type": "string"}]})
    t = pa.struct([("a", pa.int64()), ("s", pa.string())])
    good = pa.array([{"a": i, "s": "x"} for i in range(4)], t)
    bad = pa.array([{"a": 1, "s": "x"}] * 3 + [{"a": 2**40, "s": "x"}], t)
    batches = [pa.RecordBatch.from_arrays([v], ["value"]) for v in (good, bad)]
    with pytest.raises(RecordFormatError, match=r"row 7 of the task's input: .*32 bits"):
        list(encode_record_batches(iter(batches), _encode_plan(text), "t"))
