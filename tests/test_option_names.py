"""Option keys: each side accepts what it knows and refuses the rest, naming the closest option."""

from __future__ import annotations

import logging

import pytest

from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.option_names import READER, READER_OPTIONS, WRITER, WRITER_OPTIONS
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.source.options import (
    EarliestOffsets,
    LatestOffsets,
    parse_source_options,
    validate_common,
)

READ = {"kafka.bootstrap.servers": "h:9092", "subscribe": "t"}
WRITE = {"kafka.bootstrap.servers": "h:9092", "topic": "out", "checkpointLocation": "/tmp/x"}


def read(streaming=True, **extra):
    return parse_source_options({**READ, **extra}, streaming=streaming)


def write(**extra):
    return SinkConfig.from_options({**WRITE, **extra}, streaming=True)


def refused(fn, **extra) -> str:
    with pytest.raises(KafkaConfigError) as err:
        fn(**extra)
    return str(err.value)


# ---- typos ------------------------------------------------------------------------------------


@pytest.mark.parametrize("typo, meant", [
    ("startingOffset", "startingOffsets"),
    ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
    ("subscribePatern", "subscribePattern"),
    ("failOnDatalos", "failOnDataLoss"),
    ("includeHeader", "includeHeaders"),
    ("minPartition", "minPartitions"),
    ("kafkaConsumer.pollTimeout", "kafkaConsumer.pollTimeoutMs"),
    ("bootstrap.servers", "kafka.bootstrap.servers"),
    ("ignoreUnknownOption", "ignoreUnknownOptions"),
])
def test_a_reader_typo_names_the_key_and_the_closest_option(typo, meant):
    msg = refused(read, **{typo: "1"})
    assert msg.startswith(f"unknown option '{typo}'; did you mean '{meant}'?")
    assert "ignoreUnknownOptions" in msg  # and how to opt out


def test_the_issue_case_fails_instead_of_starting_at_latest():
    """A new stream with the typo would have started at latest and skipped the topic."""
    msg = refused(read, startingOffset="earliest")
    assert msg.startswith("unknown option 'startingOffset'; did you mean 'startingOffsets'? "
                          "The txkafka reader refuses options it does not use")
    assert read(startingOffsets="earliest").starting == EarliestOffsets()


@pytest.mark.parametrize("typo, meant", [
    ("topik", "topic"),
    ("deliveryGuarantees", "deliveryGuarantee"),
    ("transactionalId", "transactionalIdPrefix"),
    ("checkpointLocaton", "checkpointLocation"),
    ("checkpoint", "checkpointLocation"),
    ("commitTimeout", "commitTimeoutMs"),
    ("kafka_bootstrap_servers", "kafka.bootstrap.servers"),
])
def test_a_writer_typo_names_the_key_and_the_closest_option(typo, meant):
    msg = refused(write, **{typo: "x"})
    assert msg.startswith(f"unknown option '{typo}'; did you mean '{meant}'?")
    assert "The txkafka writer refuses options it does not use" in msg


def test_the_check_runs_where_the_query_starts():
    """load() (schema), and both readers and the writers, parse through the checked functions."""
    with pytest.raises(KafkaConfigError, match="unknown option 'startingOffset'"):
        validate_common({**READ, "startingOffset": "earliest"})
    with pytest.raises(KafkaConfigError, match="unknown option 'startingOffset'"):
        read(streaming=False, startingOffset="earliest")
    with pytest.raises(KafkaConfigError, match="unknown option 'topik'"):
        SinkConfig.from_options({**WRITE, "topik": "x"}, streaming=False)


def test_every_unknown_key_is_named_at_once():
    msg = refused(read, startingOffset="earliest", flavour="vanilla", colour="red")
    assert msg.startswith("unknown options 'colour', 'flavour', 'startingOffset' (did you mean "
                          "'startingOffsets'?).")


def test_a_key_with_no_close_option_is_named_alone():
    msg = refused(read, flavour="vanilla")
    assert msg.startswith("unknown option 'flavour'. The txkafka reader")


def test_a_kafka_client_setting_without_its_prefix_gets_the_prefixed_name():
    msg = refused(write, **{"linger.ms": "5"})
    assert msg.startswith("unknown option 'linger.ms'; a Kafka client setting takes the prefix "
                          "'kafka.': 'kafka.linger.ms'.")


def test_a_typo_of_the_other_sides_option_says_whose_it_is():
    msg = refused(read, topik="out")
    assert msg.startswith("unknown option 'topik'; did you mean 'topic'? That is an option of the "
                          "writer.")


def test_a_typo_inside_kafka_keys_is_left_to_librdkafka():
    """kafka.* keys pass this check; librdkafka's own check (client.config) names unknown ones."""
    o = read(**{"kafka.socket.timeout.ms": "1000"})
    assert o.client_conf["socket.timeout.ms"] == "1000"


# ---- case ------------------------------------------------------------------------------------


def test_keys_are_case_insensitive_as_spark_passes_them():
    # Spark hands the data source lower-cased keys (its CaseInsensitiveDict).
    lowered = {"kafka.bootstrap.servers": "h:9092", "subscribe": "t",
               "startingoffsets": "earliest", "maxoffsetspertrigger": "10"}
    o = parse_source_options(lowered, streaming=True)
    assert o.starting == EarliestOffsets() and o.max_offsets_per_trigger == 10
    assert read(STARTINGOFFSETS="earliest", IncludeHeaders="true").include_headers
    cfg = SinkConfig.from_options({"KAFKA.BOOTSTRAP.SERVERS": "h:9092", "TOPIC": "out",
                                   "checkpointlocation": "/x", "DELIVERYGUARANTEE":
                                   "at_least_once"}, streaming=True)
    assert cfg.topic == "out" and not cfg.exactly_once


def test_a_typo_in_another_case_still_finds_the_option():
    assert refused(read, startingoffset="earliest").startswith(
        "unknown option 'startingoffset'; did you mean 'startingOffsets'?")
    assert refused(write, TOPIK="x").startswith("unknown option 'TOPIK'; did you mean 'topic'?")


# ---- the other side's options ----------------------------------------------------------------


@pytest.mark.parametrize("key, needle", [
    ("topic", "the reader reads the topics named by 'subscribe', 'subscribePattern' or 'assign'"),
    ("checkpointLocation", "set it on the writer (df.writeStream.option(\"checkpointLocation\", "
                           "...)); the reader's offsets live in that query's checkpoint"),
    ("deliveryGuarantee", "set it on the writer (df.write/df.writeStream) or remove it"),
    ("TRANSACTIONALIDPREFIX", "set it on the writer"),
])
def test_a_writer_option_given_to_the_reader_has_its_own_message(key, needle):
    msg = refused(read, **{key: "x"})
    name = WRITER.documented_name(key.lower())
    assert msg.startswith(f"option '{name}' is an option of the txkafka writer, not of the reader "
                          "(spark.read/spark.readStream), which would ignore it: " + needle)


@pytest.mark.parametrize("key, needle", [
    ("subscribe", "the writer writes to the 'topic' option or the 'topic' column"),
    ("assign", "the writer writes to the 'topic' option or the 'topic' column; a 'partition' "
               "column chooses partitions"),
    ("startingOffsets", "set it on the reader (spark.read/spark.readStream) or remove it"),
    ("maxoffsetspertrigger", "set it on the reader"),
    ("failOnDataLoss", "set it on the reader"),
])
def test_a_reader_option_given_to_the_writer_has_its_own_message(key, needle):
    msg = refused(write, **{key: "x"})
    name = READER.documented_name(key.lower())
    assert msg.startswith(f"option '{name}' is an option of the txkafka reader, not of the writer "
                          "(df.write/df.writeStream), which would ignore it: " + needle)


def test_other_side_and_unknown_keys_are_reported_together():
    msg = refused(write, startingOffsets="earliest", topik="x")
    assert msg.startswith("option 'startingOffsets' is an option of the txkafka reader")
    assert "; unknown option 'topik'; did you mean 'topic'?" in msg


# ---- keys Spark adds, and the test-only key --------------------------------------------------


def test_the_key_spark_adds_to_a_streams_writer_is_accepted():
    write(queryName="q")
    assert refused(read, queryName="q").startswith(
        "option 'queryName' is an option of the txkafka writer, not of the reader")


@pytest.mark.parametrize("side, key, needle", [
    ("reader", "path", "the reader reads the topics named by 'subscribe', 'subscribePattern' or "
                       "'assign'; call load() without a path"),
    ("reader", "paths", "call load() without a path"),
    ("writer", "path", "the writer writes to the 'topic' option or the 'topic' column; call save() "
                       "or start() without a path and set option(\"topic\", ...)"),
])
def test_a_path_is_refused_since_txkafka_would_ignore_it(side, key, needle):
    """Spark sets path/paths only from load(path), save(path), start(path): save("out") on rows
    with a topic column would otherwise write to the column's topics."""
    msg = refused(read if side == "reader" else write, **{key: "out"})
    assert msg.startswith(f"option '{key}' (set by a path given to load(), save() or start()) has "
                          "no meaning for txkafka, which would ignore it: ")
    assert needle in msg
    if side == "reader":
        read(**{key: "out", "ignoreUnknownOptions": key})
    else:
        write(**{key: "out", "ignoreUnknownOptions": key})


def test_fault_injection_is_no_option_of_either_side():
    # Test machinery is armed from the environment only (connector/fault_injection.py).
    assert "unknown option 'txkafka.faultInjection'" in refused(write, **{"txkafka.faultInjection": "x"})
    assert "unknown option 'txkafka.faultInjection'" in refused(read, **{"txkafka.faultInjection": "x"})
    assert "faultInjection".lower() not in {n.lower() for n in (*READER_OPTIONS, *WRITER_OPTIONS)}


def test_spark_checkpoint_setting_is_named_when_the_sink_has_no_checkpoint():
    """With spark.sql.streaming.checkpointLocation set instead of the option, Spark hands the
    sink only queryName (observed in pyspark 4.3)."""
    msg = refused(lambda: SinkConfig.from_options(
        {"kafka.bootstrap.servers": "h:9092", "topic": "out", "queryname": "q"}, streaming=True))
    assert "set option('checkpointLocation', ...)" in msg
    assert "does not pass the spark.sql.streaming.checkpointLocation setting" in msg


# ---- the escape hatch ------------------------------------------------------------------------


def test_listed_keys_are_ignored_with_a_warning(caplog):
    caplog.set_level(logging.WARNING, logger="txkafka.options")
    o = read(startingOffset="earliest", newFeature="1",
             ignoreUnknownOptions=" StartingOffset , newfeature,")
    assert o.starting == LatestOffsets()  # ignored means ignored: not read as startingOffsets
    assert "txkafka reader: ignoring option(s) newFeature, startingOffset, listed in " \
           "ignoreUnknownOptions" in caplog.text


def test_one_options_map_can_serve_both_sides():
    shared = {"kafka.bootstrap.servers": "h:9092", "subscribe": "in", "topic": "out",
              "checkpointLocation": "/x", "ignoreUnknownOptions": "topic,checkpointLocation,"
                                                                  "subscribe"}
    assert parse_source_options(shared, streaming=True).strategy.topics == ("in",)
    cfg = SinkConfig.from_options(shared, streaming=True)
    assert cfg.topic == "out" and cfg.checkpoint_location == "/x"  # known keys are still used


def test_a_key_not_listed_still_fails():
    msg = refused(read, startingOffset="earliest", ignoreUnknownOptions="other")
    assert msg.startswith("unknown option 'startingOffset'; did you mean 'startingOffsets'?")


def test_nothing_is_ignored_by_default_or_by_an_empty_list():
    for hatch in ({}, {"ignoreUnknownOptions": ""}, {"ignoreUnknownOptions": " , "}):
        with pytest.raises(KafkaConfigError, match="unknown option 'x'"):
            read(x="1", **hatch)


def test_kafka_keys_cannot_be_listed():
    msg = refused(write, ignoreUnknownOptions="kafka.linger.ms")
    assert msg.startswith("option 'ignoreUnknownOptions' lists 'kafka.linger.ms': kafka.* keys go "
                          "to the Kafka client")

