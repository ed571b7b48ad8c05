"""Reader option defects found in review: each fails the query at start with the option named."""

import pytest

from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.source_options import parse_source_options, validate_common

BASE = {"kafka.bootstrap.servers": "h:9092", "subscribe": "t"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="alice" password="jaas-secret-pw";')


def parse(streaming=True, **extra):
    return parse_source_options({**BASE, **extra}, streaming=streaming)


@pytest.mark.parametrize("order", ["jaas_first", "jaas_last"])
def test_jaas_config_disagreeing_with_sasl_password_is_rejected_without_secrets(order):
    # Before: the later key silently won (dict order), so the query logged in with either password.
    pairs = [("kafka.sasl.jaas.config", JAAS), ("kafka.sasl.password", "explicit-secret-pw")]
    if order == "jaas_last":
        pairs.reverse()
    with pytest.raises(KafkaConfigError, match="sasl.jaas.config.*sasl.password") as err:
        parse(**dict(pairs))
    assert "jaas-secret-pw" not in str(err.value) and "explicit-secret-pw" not in str(err.value)


def test_jaas_config_agreeing_with_sasl_username_is_accepted():
    o = parse(**{"kafka.sasl.username": "alice", "kafka.sasl.jaas.config": JAAS})
    assert o.client_conf["sasl.username"] == "alice"
    assert o.client_conf["sasl.password"] == "jaas-secret-pw"


def test_empty_group_id_is_rejected():
    # Before: accepted, and commitOffsetsToGroup published to a random generated group.
    with pytest.raises(KafkaConfigError, match="kafka.group.id"):
        parse(**{"kafka.group.id": "", "commitOffsetsToGroup": "true"})
    with pytest.raises(KafkaConfigError, match="kafka.group.id"):
        parse(**{"kafka.group.id": "  "})


def test_blank_bootstrap_servers_is_rejected():
    with pytest.raises(KafkaConfigError, match="kafka.bootstrap.servers"):
        parse(**{"kafka.bootstrap.servers": "   "})


@pytest.mark.parametrize("key,value", [("kafka.request.timeout.ms", "30000"),
                                       ("kafka.linger.ms", "5")])
def test_producer_only_settings_are_not_silently_ignored_by_the_reader(key, value):
    # librdkafka's consumer ignores producer properties (only a CONFWARN log line): Java consumer
    # users commonly set kafka.request.timeout.ms on Spark's source.
    with pytest.raises(KafkaConfigError, match=f"'{key}'"):
        validate_common({**BASE, key: value})


def test_user_schema_with_the_right_names_but_wrong_types_is_rejected():
    from pyspark.sql.types import StringType, StructField, StructType

    from txkafka.python_datasource.kafka_reader import _check_schema, _schema

    wrong = StructType([StructField(f.name, StringType()) for f in _schema(False).fields])
    with pytest.raises(KafkaConfigError, match="fixed schema"):
        _check_schema(wrong, False)
    _check_schema(_schema(True), True)  # what schema() returned is accepted


@pytest.mark.parametrize("streaming", [False, True])
def test_consumer_settings_are_checked_even_when_spark_skips_schema(streaming):
    # With .schema(...) given, Spark never calls DataSource.schema() (where validate_common ran):
    # a combination librdkafka refuses only in a consumer would otherwise fail in every task.
    from txkafka.python_datasource.kafka_reader import (
        KafkaBatchReader,
        KafkaMicroBatchStream,
        _schema,
    )

    cls = KafkaMicroBatchStream if streaming else KafkaBatchReader
    with pytest.raises(KafkaConfigError, match="'kafka.receive.message.max.bytes'"):
        cls({**BASE, "kafka.receive.message.max.bytes": "4000000"}, _schema(False))
