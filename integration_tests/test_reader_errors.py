"""Clear errors when a query starts, through real Spark: the message names the option and what was
expected, and nothing hangs."""

from __future__ import annotations

import re

import pytest

from integration_tests.reader_support import (
    QUERY_TIMEOUT_S,
    batch,
    reader_options,
    start_memory_query,
    stream,
)
from txkafka.connector.checkpoint.spark_checkpoint import SparkCheckpoint

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.mark.parametrize("options, needle", [
    ({}, "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be set"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "got subscribe, assign"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": 1'},
     "option 'startingOffsets' is not valid JSON"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "lots"},
     "option 'maxOffsetsPerTrigger' must be an integer >= 1 (digits, no separators), got 'lots'"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"},
     "option 'kafka.auto.offset.reset' is not supported: set the source option startingOffsets"),
    ({"subscribe": "a", "kafka.enable.auto.commit": "true"},
     "option 'kafka.enable.auto.commit' is not supported"),
    ({"subscribe": "a", "kafka.value.deserializer": "x"},
     "option 'kafka.value.deserializer' is not supported"),
    ({"subscribe": "a", "kafka.ssl.truststore.location": "/x.jks"},
     "could not read kafka.ssl.truststore.location='/x.jks'"),
])
def test_bad_options_fail_at_load(spark, kafka, options, needle):
    with pytest.raises(Exception, match=needle.replace("(", r"\(").replace(")", r"\)")):
        spark.readStream.format("txkafka").options(**reader_options(kafka, **options)).load()
    with pytest.raises(Exception, match=needle.replace("(", r"\(").replace(")", r"\)")):
        spark.read.format("txkafka").options(**reader_options(kafka, **options)).load()


def test_a_mistyped_option_fails_the_stream_before_any_batch(spark, kafka, checkpoint_dir):
    """With 'startingOffset' (no s) a new stream used to start at latest and skip every
    record already in the topic. Spark passes keys lower-cased, so the message shows them so."""
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [(f"k{i}", f"v{i}") for i in range(20)])
    opts = reader_options(kafka, subscribe=topic, startingOffset="earliest")
    needle = re.escape("unknown option 'startingoffset'; did you mean 'startingOffsets'?")
    with pytest.raises(Exception, match=needle):  # load() asks the source for its schema
        spark.readStream.format("txkafka").options(**opts).load()
    with pytest.raises(Exception, match=needle):
        spark.read.format("txkafka").options(**opts).load()
    # Given a schema, Spark skips schema(): the stream reader refuses the key at the query's start.
    schema = batch(spark, kafka, subscribe=topic).schema
    df = spark.readStream.format("txkafka").schema(schema).options(**opts).load()
    q, _ = start_memory_query(df, checkpoint_dir)
    try:
        with pytest.raises(Exception, match=needle):
            q.awaitTermination(QUERY_TIMEOUT_S)
    finally:
        q.stop()
    assert q.recentProgress == []
    assert SparkCheckpoint(checkpoint_dir).offsets_batch_ids() == []  # no batch was ever planned
    # The same query spelled right reads the topic (so the failure above is the typo's alone).
    fixed = {k: v for k, v in opts.items() if k != "startingOffset"}
    assert batch(spark, kafka, **{**fixed, "startingOffsets": "earliest"}).count() == 20


def test_mode_specific_errors(spark, kafka, checkpoint_dir):
    with pytest.raises(Exception, match="cannot be 'latest' for a batch query"):
        batch(spark, kafka, subscribe="a", startingOffsets="latest").collect()
    df = stream(spark, kafka, subscribe="a", endingOffsets="latest")
    with pytest.raises(Exception, match="option 'endingOffsets' is for batch queries only"):
        q = df.writeStream.format("noop").option("checkpointLocation", checkpoint_dir).start()
        q.awaitTermination(QUERY_TIMEOUT_S)


def test_unknown_topic_in_assign_fails_the_query_at_start(spark, kafka, checkpoint_dir):
    existing = kafka.create_topic(partitions=2)
    with pytest.raises(Exception, match="option 'assign' names topic 'no-such-topic-x', which does "
                                        "not exist"):
        batch(spark, kafka, assign='{"no-such-topic-x": [0]}').collect()
    q = (stream(spark, kafka, assign=f'{{"{existing}": [0, 5]}}').writeStream.format("noop")
         .option("checkpointLocation", checkpoint_dir).start())
    with pytest.raises(Exception, match=f"names partition 5 of topic '{existing}', which has "
                                        "partitions 0..1"):
        q.awaitTermination(QUERY_TIMEOUT_S)
    assert not q.isActive


def test_unreachable_cluster_fails_in_bounded_time(spark):
    df = (spark.read.format("txkafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:1").option("subscribe", "t")
          .option("kafka.socket.timeout.ms", "2000").option("fetchOffset.numRetries", "2")
          .load())
    with pytest.raises(Exception, match="could not fetch topic metadata from Kafka after 2 "
                                        "attempt"):
        df.collect()
