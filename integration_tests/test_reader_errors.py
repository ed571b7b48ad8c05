"""Clear errors when a query starts, through real Spark: the message names the option and what was
expected, and nothing hangs."""

from __future__ import annotations

import pytest

from integration_tests.reader_support import QUERY_TIMEOUT_S, batch, reader_options, stream

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.mark.parametrize("options, needle", [
    ({}, "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be set"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "got subscribe, assign"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": 1'},
     "option 'startingOffsets' is not valid JSON"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "lots"},
     "option 'maxOffsetsPerTrigger' must be an integer, got 'lots'"),
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
