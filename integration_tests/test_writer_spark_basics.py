"""The txkafka sink in real Spark: start-time errors, batch writes, schema handling."""

from __future__ import annotations

import re

import pytest

from integration_tests.kafka_helpers import unique


def _failure_text(exc: BaseException) -> str:
    return str(exc) + str(getattr(exc, "desc", ""))


def _stream_error(spark, kafka, tmp_path, df=None, **opts) -> str:
    df = df if df is not None else spark.readStream.format("rate").load().selectExpr(
        "CAST(value AS STRING) AS value")
    w = df.writeStream.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap) \
        .option("checkpointLocation", str(tmp_path / unique("ck")))
    for k, v in opts.items():
        w = w.option(k, v)
    q = None
    try:
        q = w.start()
        q.awaitTermination(120)
    except Exception as e:  # noqa: BLE001 - Spark wraps Python errors in several types
        return _failure_text(e)
    finally:
        if q is not None and q.isActive:
            q.stop()
    pytest.fail("the query started and ran without the expected error")


def test_start_errors_name_the_problem(spark, kafka, tmp_path):
    topic = kafka.create_topic()
    assert "does not exist" in _stream_error(spark, kafka, tmp_path, topic=unique("missing"))
    assert "no topic to write to" in _stream_error(spark, kafka, tmp_path)
    no_value = spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS key")
    assert "needs a 'value' column" in _stream_error(spark, kafka, tmp_path, df=no_value, topic=topic)
    assert "kafka.value.serializer" in _stream_error(
        spark, kafka, tmp_path, topic=topic, **{"kafka.value.serializer": "x"})
    assert "transaction.max.timeout.ms" in _stream_error(
        spark, kafka, tmp_path, topic=topic, **{"kafka.transaction.timeout.ms": "86400000"})
    assert "deliveryGuarantee" in _stream_error(spark, kafka, tmp_path, topic=topic,
                                                deliveryGuarantee="maybe")
    assert kafka.read_all(topic) == []


def test_a_mistyped_option_fails_the_write_and_writes_nothing(spark, kafka, tmp_path):
    """'topik' for 'topic', on rows carrying a topic column (as rows read from Kafka
    do), would have sent every row back to the column's topic instead of failing."""
    src, out = kafka.create_topic(), kafka.create_topic()
    needle = "unknown option 'topik'; did you mean 'topic'?"
    rows = spark.createDataFrame([(src, f"v{i}") for i in range(10)], "topic string, value string")
    with pytest.raises(Exception, match=re.escape(needle)):
        rows.write.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap) \
            .option("topik", out).mode("append").save()
    rate = spark.readStream.format("rate").load().selectExpr(
        f"'{src}' AS topic", "CAST(value AS STRING) AS value")
    assert needle in _stream_error(spark, kafka, tmp_path, df=rate, topik=out)
    assert kafka.read_all(out) == [] and kafka.read_all(src) == []


def test_batch_write_commits_all_rows_in_one_set_of_transactions(spark, kafka):
    topic = kafka.create_topic(partitions=3)
    rows = [(f"k{i}", f"v{i}") for i in range(500)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(4)
    prefix = unique("batch")
    df.write.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap) \
        .option("topic", topic).option("transactionalIdPrefix", prefix).mode("append").save()
    got = kafka.read_all(topic)
    assert sorted((r.key.decode(), r.value.decode()) for r in got) == sorted(rows)
    assert kafka.open_transactions(f"{prefix}-") == []


def test_batch_write_topic_column_and_headers(spark, kafka):
    t1, t2 = kafka.create_topic(), kafka.create_topic()
    df = spark.createDataFrame(
        [(t1, "a", [("h", bytearray(b"1"))]), (t2, "b", None)],
        "topic string, value string, headers array<struct<key:string,value:binary>>")
    df.write.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap).mode("append").save()
    r1, r2 = kafka.read_all(t1), kafka.read_all(t2)
    assert [(r.value, r.headers) for r in r1] == [(b"a", (("h", b"1"),))]
    assert [r.value for r in r2] == [b"b"]


def test_batch_write_at_least_once(spark, kafka):
    topic = kafka.create_topic()
    df = spark.createDataFrame([(f"v{i}",) for i in range(100)], "value string")
    df.write.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap) \
        .option("topic", topic).option("deliveryGuarantee", "at_least_once").mode("append").save()
    assert sorted(r.value for r in kafka.read_all(topic)) == sorted(f"v{i}".encode() for i in range(100))


def test_batch_writes_inside_foreach_batch_commit_every_batch(spark, kafka, tmp_path):
    """A df.write inside foreachBatch is a batch write (batch 0), though its tasks inherit the
    stream's micro-batch id: batches after the first failed at commit."""
    src, out = kafka.create_topic(), kafka.create_topic()
    kafka.produce(src, [(None, f"v{i}") for i in range(30)])
    prefix = unique("fb")

    def write(df, _batch_id):
        df.selectExpr("value").write.format("txkafka") \
            .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", out) \
            .option("transactionalIdPrefix", prefix).mode("append").save()

    q = (spark.readStream.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("subscribe", src).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", 10).load()
         .writeStream.foreachBatch(write).trigger(availableNow=True)
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    q.awaitTermination(180)
    assert q.exception() is None
    assert len([p for p in q.recentProgress if p["numInputRows"]]) == 3
    assert sorted(r.value for r in kafka.read_all(out)) == sorted(f"v{i}".encode() for i in range(30))
    assert kafka.open_transactions(f"{prefix}-") == []
