"""The reader's options: Spark's names and defaults, and a clear error for every mistake."""

import pickle
import re

import pytest

from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.source import options as source_options
from txkafka.connector.source.options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    Assign,
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    PartitionTimestamps,
    SpecificOffsets,
    Subscribe,
    SubscribePattern,
    parse_source_options,
    parse_time_ms,
    validate_common,
)

BASE = {"kafka.bootstrap.servers": "h:9092", "subscribe": "t"}


def parse(streaming=True, **extra):
    return parse_source_options({**BASE, **extra}, streaming=streaming)


def test_spark_defaults():
    o = parse()
    assert o.strategy == Subscribe(("t",))
    assert o.starting == LatestOffsets() and o.ending == LatestOffsets()
    assert parse(streaming=False).starting == EarliestOffsets()
    assert o.fail_on_data_loss is True
    assert o.max_offsets_per_trigger is None and o.min_offsets_per_trigger is None
    assert o.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS == 15 * 60 * 1000
    assert o.min_partitions is None and o.max_records_per_partition is None
    assert o.include_headers is False
    assert o.poll_timeout_ms == 120_000
    assert o.fetch_offset_num_retries == 3 and o.fetch_offset_retry_interval_ms == 1000
    assert o.group_id.startswith("spark-kafka-source-")
    assert parse(streaming=False).group_id.startswith("spark-kafka-relation-")  # Spark's, for spark.read
    assert o.isolation_level == "read_committed"
    assert o.commit_offsets_to_group is False


def test_option_names_are_case_insensitive():
    o = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": "ev-.*",
                              "MAXOFFSETSPERTRIGGER": "10", "includeheaders": "TRUE"},
                             streaming=True)
    assert o.strategy == SubscribePattern("ev-.*")
    assert o.max_offsets_per_trigger == 10 and o.include_headers is True


@pytest.mark.parametrize("opts, needle", [
    ({"kafka.bootstrap.servers": "h:1"}, "got none"),
    ({**BASE, "assign": '{"t": [0]}'}, "got subscribe, assign"),
    ({**BASE, "subscribePattern": "x.*"}, "subscribe, subscribePattern"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": " , "}, "lists no topics"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, "not a valid regular expression"),
    ({"kafka.bootstrap.servers": "h:1", "assign": "{t: [0]}"}, "option 'assign' is not valid JSON"),
    ({"kafka.bootstrap.servers": "h:1", "assign": '{"t": 0}'}, "non-empty list of partitions"),
    ({"kafka.bootstrap.servers": "h:1", "assign": '{"t": [-1]}'}, "expected partition numbers"),
    ({"subscribe": "t"}, "kafka.bootstrap.servers"),
])
def test_strategy_and_bootstrap_errors(opts, needle):
    with pytest.raises(KafkaConfigError, match=needle):
        parse_source_options(opts, streaming=True)
    with pytest.raises(KafkaConfigError):
        validate_common(opts)  # the same checks run at load()


def test_subscribe_and_assign_parsed():
    assert parse(subscribe=" a, b ,a").strategy == Subscribe(("a", "b"))
    o = parse_source_options({"kafka.bootstrap.servers": "h:1",
                              "assign": '{"b": [2, 0], "a": [1]}'}, streaming=True)
    assert o.strategy == Assign((("a", 1), ("b", 0), ("b", 2)))


@pytest.mark.parametrize("key, value, needle", [
    ("startingOffsets", '{"t": {"0": 5', "option 'startingOffsets' is not valid JSON"),
    ("startingOffsets", "first", "must be 'earliest', 'latest' or JSON"),
    ("startingOffsets", '{"t": {"0": -3}}', "offsets are >= 0, or -2"),
    ("startingOffsets", '{"t": {"x": 1}}', "not a partition number"),
    ("startingOffsets", '{"t": {"0": "5"}}', "expected an integer"),
    ("startingOffsets", '{"t": [0]}', "must be an object of partition -> number"),
    ("startingOffsetsByTimestamp", '{"t": {"0": -5}}', "timestamps are milliseconds"),
    ("startingTimestamp", "yesterday", "option 'startingTimestamp' must be an integer"),
    ("startingOffsetsByTimestampStrategy", "skip", "'error' or 'latest'"),
    ("maxOffsetsPerTrigger", "1e3", "option 'maxOffsetsPerTrigger' must be an integer"),
    ("maxOffsetsPerTrigger", "0", "must be >= 1"),
    ("minOffsetsPerTrigger", "-4", "must be >= 1"),
    ("minPartitions", "two", "option 'minPartitions' must be an integer"),
    ("maxRecordsPerPartition", "0", "must be >= 1"),
    ("kafkaConsumer.pollTimeoutMs", "soon", "kafkaConsumer.pollTimeoutMs"),
    ("fetchOffset.numRetries", "0", "must be >= 1"),
    ("fetchOffset.retryIntervalMs", "-1", "must be >= 0"),
    ("failOnDataLoss", "yes", "option 'failOnDataLoss' must be true or false"),
    ("includeHeaders", "1", "option 'includeHeaders' must be true or false"),
    ("maxTriggerDelay", "5 parsecs", "option 'maxTriggerDelay' must be a duration"),
    ("endingOffsets", "latest", "option 'endingOffsets' is for batch queries only"),
    ("endingTimestamp", "1000", "option 'endingTimestamp' is for batch queries only"),
    ("kafka.isolation.level", "serializable", "one of read_committed, read_uncommitted"),
])
def test_bad_values_name_the_option(key, value, needle):
    with pytest.raises(KafkaConfigError, match=needle):
        parse(**{key: value})


def test_min_above_max_rejected():
    with pytest.raises(KafkaConfigError, match="must not exceed 'maxOffsetsPerTrigger'"):
        parse(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5")


@pytest.mark.parametrize("key, value, needle", [
    ("startingOffsets", "latest", "cannot be 'latest' for a batch query"),
    ("startingOffsets", '{"t": {"0": -1}}', "-1 \\(latest\\), which a batch query cannot start"),
    ("endingOffsets", "earliest", "cannot be 'earliest'"),
    ("endingOffsets", '{"t": {"0": -2}}', "cannot be an ending offset"),
])
def test_batch_only_rules(key, value, needle):
    with pytest.raises(KafkaConfigError, match=needle):
        parse(streaming=False, **{key: value})


def test_offset_json_and_timestamp_precedence():
    o = parse(startingOffsets='{"t": {"1": -2, "0": 23}}')
    assert o.starting == SpecificOffsets(((("t", 0), 23), (("t", 1), -2)))
    o = parse(startingOffsets="earliest", startingOffsetsByTimestamp='{"t": {"0": 1000}}')
    assert o.starting == PartitionTimestamps(((("t", 0), 1000),))
    o = parse(startingOffsets="earliest", startingOffsetsByTimestamp='{"t": {"0": 1000}}',
              startingTimestamp="5")
    assert o.starting == GlobalTimestamp(5)
    b = parse(streaming=False, endingTimestamp="77", endingOffsets="latest")
    assert b.ending == GlobalTimestamp(77)


@pytest.mark.parametrize("key", ["kafka.auto.offset.reset", "kafka.enable.auto.commit",
                                 "kafka.key.deserializer", "kafka.value.deserializer",
                                 # consumer_config() overwrites these: never silently
                                 "kafka.enable.partition.eof", "kafka.enable.auto.offset.store"])
def test_owned_kafka_keys_rejected(key):
    with pytest.raises(KafkaConfigError, match=f"option '{key}' is not supported"):
        parse(**{key: "x"})


def test_java_only_key_names_librdkafka_equivalent():
    with pytest.raises(KafkaConfigError, match="kafka.message.max.bytes"):
        parse(**{"kafka.max.request.size": "1000"})


def test_group_id_and_prefix():
    assert parse(**{"kafka.group.id": "mine"}).group_id == "mine"
    assert parse(groupIdPrefix="etl").group_id.startswith("etl-")
    assert parse(**{"kafka.group.id": "g"}).consumer_config()["group.id"] == "g"


def test_commit_to_group_needs_a_group():
    with pytest.raises(KafkaConfigError, match="needs 'kafka.group.id'"):
        parse(commitOffsetsToGroup="true")
    assert parse(commitOffsetsToGroup="true", **{"kafka.group.id": "lag"}).commit_offsets_to_group


def test_consumer_config_owns_reset_commit_and_eof():
    conf = parse(**{"kafka.fetch.wait.max.ms": "250"}).consumer_config()
    assert conf["auto.offset.reset"] == "error"
    assert conf["enable.auto.commit"] == "false"
    assert conf["enable.partition.eof"] == "true"
    assert conf["isolation.level"] == "read_committed"
    assert conf["fetch.wait.max.ms"] == "250"  # user settings win over txkafka's defaults
    assert parse(**{"kafka.isolation.level": "read_uncommitted"}).consumer_config()[
        "isolation.level"] == "read_uncommitted"


def test_consumer_config_keeps_fetching_while_its_queue_is_drained():
    # librdkafka's fetch.queue.backoff.ms default (1000 ms) idles a partition for a second per
    # 100k queued records; txkafka's default must reach librdkafka, and a user's value must win.
    from confluent_kafka import Consumer

    conf = parse().consumer_config()
    assert conf["fetch.queue.backoff.ms"] == "10"
    assert parse(**{"kafka.fetch.queue.backoff.ms": "200"}).consumer_config()[
        "fetch.queue.backoff.ms"] == "200"
    # The installed librdkafka knows every setting txkafka chooses (it rejects unknown ones).
    Consumer({**conf, "bootstrap.servers": "127.0.0.1:9"}).close()


def test_time_strings():
    assert parse_time_ms("15m", "x") == 900_000
    assert parse_time_ms("30s", "x") == 30_000
    assert parse_time_ms("250", "x") == 250
    assert parse_time_ms("2h", "x") == 7_200_000
    assert parse(maxTriggerDelay="45s").max_trigger_delay_ms == 45_000


def test_parsed_options_pickle_and_hide_secrets():
    o = parse(**{"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
                 "kafka.sasl.username": "u", "kafka.sasl.password": "s3cr3t-pw"})
    assert "s3cr3t-pw" not in repr(o)
    again = pickle.loads(pickle.dumps(o))
    assert again == o and again.client_conf["sasl.password"] == "s3cr3t-pw"


def test_client_settings_librdkafka_rejects_fail_clearly_without_secrets():
    from txkafka.connector.source.range_reader import ConsumerPool, FetchTask
    from txkafka.connector.source.offset_reader import KafkaOffsetReader

    o = parse(**{"kafka.sasl.password": "pw-secret-1", "kafka.no.such.setting": "1"})
    with pytest.raises(KafkaConfigError, match="no.such.setting") as err:
        KafkaOffsetReader(o)._admin()
    assert "pw-secret-1" not in str(err.value)
    task = FetchTask("t", 0, 0, 5, tuple(sorted(o.consumer_config().items())), 1000, True, False)
    with pytest.raises(KafkaConfigError, match="no.such.setting"):
        ConsumerPool().acquire(task)


def test_client_settings_librdkafka_rejects_fail_at_load_naming_the_option():
    # librdkafka checks this pair only when a consumer is created: at load, not in every task.
    with pytest.raises(KafkaConfigError, match="'kafka.receive.message.max.bytes'"):
        validate_common({**BASE, "kafka.receive.message.max.bytes": "4000000"})
    with pytest.raises(KafkaConfigError, match="'kafka.no.such.setting'"):
        validate_common({**BASE, "kafka.no.such.setting": "1"})


def test_librdkafka_name_of_the_fetch_size_is_not_overridden():
    conf = parse(**{"kafka.fetch.message.max.bytes": "65536"}).consumer_config()
    assert conf["fetch.message.max.bytes"] == "65536" and "max.partition.fetch.bytes" not in conf
    assert parse().consumer_config()["max.partition.fetch.bytes"] == str(8 * 1024 * 1024)


def test_subscribe_pattern_is_trimmed_like_spark():
    opts = parse(**{"subscribe": None, "subscribePattern": "  orders-.*  "})
    assert opts.strategy == SubscribePattern("orders-.*")


JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="alice" password="jaas-secret-pw";')


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


@pytest.mark.parametrize("raw", ["1_000", "5.0", "0x10", ""])
def test_integers_follow_javas_parse_long(raw):
    with pytest.raises(KafkaConfigError, match="'maxOffsetsPerTrigger' must be an integer"):
        parse(maxOffsetsPerTrigger=raw)
    assert parse(maxOffsetsPerTrigger="+5").max_offsets_per_trigger == 5


def test_integers_beyond_a_long_and_waits_python_cannot_sleep_fail_naming_the_option():
    # Spark's Long.parseLong refuses 2**63; a retry interval of 10**13 ms passed before and ended
    # in a bare OverflowError of time.sleep at the first retried offset look-up.
    with pytest.raises(KafkaConfigError, match="'maxOffsetsPerTrigger' must be at most"):
        parse(maxOffsetsPerTrigger=str(2**63))
    assert parse(maxOffsetsPerTrigger=str(2**63 - 1)).max_offsets_per_trigger == 2**63 - 1
    with pytest.raises(KafkaConfigError, match=r"'fetchOffset.retryIntervalMs' must be at most "
                       r"2147483647 \(ms"):
        parse(**{"fetchOffset.retryIntervalMs": "10000000000000"})


def test_microsecond_durations_round_down_to_milliseconds_like_spark():
    assert parse_time_ms("2500us", "maxTriggerDelay") == 2
    assert parse(maxTriggerDelay="100us").max_trigger_delay_ms == 0


def test_batch_query_warns_about_stream_only_commit_offsets_to_group(caplog):
    with caplog.at_level("WARNING", logger="txkafka"):
        parse(streaming=False, commitOffsetsToGroup="true", **{"kafka.group.id": "g"})
    assert "commitOffsetsToGroup apply to streaming queries only" in caplog.text


def test_group_id_prefix_next_to_a_group_id_is_reported_as_ignored(caplog):
    with caplog.at_level("WARNING", logger="txkafka"):
        o = parse(groupIdPrefix="mine", **{"kafka.group.id": "g"})
    assert o.group_id == "g"
    assert "'groupIdPrefix' is ignored" in caplog.text


@pytest.mark.parametrize("isolation, held", [("read_committed", True),
                                             ("read_uncommitted", False)])
def test_a_start_past_latest_names_the_start_not_ending_offsets(isolation, held):
    from txkafka.python_datasource.kafka_reader import _ends_before_start

    o = parse(streaming=False, startingOffsets='{"t":{"0":10}}',
              **{"kafka.isolation.level": isolation})
    text = _ends_before_start(o, ("t", 0), 10, 7)
    assert "starting offset 10 is past the latest offset 7" in text
    assert "check startingOffsets" in text and "endingOffsets" not in text
    assert ("open transaction" in text) is held
    o = parse(streaming=False, startingOffsets='{"t":{"0":10}}', endingOffsets='{"t":{"0":7}}')
    assert "the ending offset 7 is before the starting offset 10" in \
        _ends_before_start(o, ("t", 0), 10, 7)


def test_fetcher_defaults_to_txkafkas_own_fetch_where_the_settings_allow_it():
    assert parse().fetcher == "wire"
    assert parse(fetcher="librdkafka").fetcher == "librdkafka"
    assert parse(fetcher=" WIRE ").fetcher == "wire"
    # Settings only librdkafka applies on the fetch path: auto reads through it ...
    assert parse(**{"kafka.client.rack": "eu-1a"}).fetcher == "librdkafka"
    assert parse(**{"kafka.check.crcs": "true"}).fetcher == "librdkafka"
    kerberos = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "GSSAPI"}
    assert parse(**kerberos).fetcher == "librdkafka"
    scram = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
             "kafka.sasl.username": "u", "kafka.sasl.password": "hunter2"}
    assert parse(**scram).fetcher == "wire"
    tls = {"kafka.security.protocol": "SSL", "kafka.ssl.ca.location": "/ca.pem"}
    assert parse(**tls).fetcher == "wire"
    assert parse(**tls, **{"kafka.ssl.crl.location": "/crl.pem"}).fetcher == "wire"  # applied
    assert parse(**tls, **{"kafka.ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384"}
                 ).fetcher == "librdkafka"
    with pytest.raises(KafkaConfigError, match=r"'fetcher' is 'wire', but kafka.ssl.curves.list "
                                               r"is set: only librdkafka's TLS"):
        parse(fetcher="wire", **tls, **{"kafka.ssl.curves.list": "P-256"})
    # ... and insisting on wire names the setting at start.
    with pytest.raises(KafkaConfigError, match=r"option 'fetcher' is 'wire', but "
                                               r"kafka.client.rack is set"):
        parse(fetcher="wire", **{"kafka.client.rack": "eu-1a"})
    with pytest.raises(KafkaConfigError, match=r"'fetcher' is 'wire', but kafka.sasl.mechanism="
                                               r"'GSSAPI': txkafka's own fetch supports PLAIN"):
        parse(fetcher="wire", **kerberos)
    with pytest.raises(KafkaConfigError, match=r"option 'fetcher' must be one of auto, wire, "
                                               r"librdkafka, got 'java'"):
        parse(fetcher="java")


def test_fetcher_choice_travels_to_executors():
    o = parse(fetcher="librdkafka")
    assert pickle.loads(pickle.dumps(o)).fetcher == "librdkafka"


@pytest.mark.parametrize("key, value", [
    ("kafka.socket.receive.buffer.bytes", "1048576"), ("kafka.client.dns.lookup",
                                                       "use_all_dns_ips"),
    ("kafka.broker.address.family", "v4"), ("kafka.fetch.error.backoff.ms", "50"),
    ("kafka.socket.connection.setup.timeout.ms", "5000"),
    ("kafka.queued.max.messages.kbytes", "65536"),  # txkafka's own value (32768) passes
])
def test_a_setting_the_wire_fetch_does_not_apply_is_never_dropped(key, value, caplog):
    """Nothing is silently ignored: auto reads with librdkafka (saying so once, naming the key),
    wire fails naming it."""
    with caplog.at_level("INFO", logger="txkafka.reader"):
        assert parse(**{key: value}).fetcher == "librdkafka"
    assert [r.getMessage() for r in caplog.records if key in r.getMessage()], caplog.text
    with pytest.raises(KafkaConfigError, match=rf"'fetcher' is 'wire', but {re.escape(key)} is "
                                               r"set: txkafka's own fetch does not apply it"):
        parse(fetcher="wire", **{key: value})


def test_wire_fetch_names_every_setting_it_does_not_apply():
    imds = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.oauthbearer.method": "oidc",
            "kafka.sasl.oauthbearer.metadata.authentication.type": "azure_imds"}
    assert parse(**imds).fetcher == "librdkafka"  # a login only librdkafka's consumer has
    with pytest.raises(KafkaConfigError, match=r"metadata.authentication.type='azure_imds': "
                                               r"OAUTHBEARER tokens from cloud metadata"):
        parse(fetcher="wire", **imds)
    with pytest.raises(KafkaConfigError, match=r"kafka.broker.address.family, "
                                               r"kafka.fetch.error.backoff.ms are set"):
        parse(fetcher="wire", **{"kafka.fetch.error.backoff.ms": "50",
                                 "kafka.broker.address.family": "v4"})


PEM_CHAIN = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
SECURE_CONFIGS = {
    "sasl_ssl_plain": {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
                       "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.'
                       'PlainLoginModule required username="u" password="p";',
                       "kafka.ssl.ca.location": "/ca.pem",
                       "kafka.ssl.endpoint.identification.algorithm": ""},
    "sasl_ssl_scram": {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanisms":
                       "SCRAM-SHA-256", "kafka.sasl.username": "u", "kafka.sasl.password": "p",
                       "kafka.enable.ssl.certificate.verification": "false"},
    "oauthbearer_oidc": {"kafka.security.protocol": "SASL_SSL",
                         "kafka.sasl.mechanism": "OAUTHBEARER",
                         "kafka.sasl.oauthbearer.method": "oidc",
                         "kafka.sasl.oauthbearer.client.id": "r",
                         "kafka.sasl.oauthbearer.client.secret": "s",
                         "kafka.sasl.oauthbearer.scope": "kafka",
                         "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp/token",
                         "kafka.https.ca.location": "/idp-ca.pem"},
    "ssl_pem": {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "PEM",
                "kafka.ssl.truststore.location": "/ca.pem", "kafka.ssl.keystore.type": "PEM",
                "kafka.ssl.keystore.certificate.chain": PEM_CHAIN,
                "kafka.ssl.keystore.key": "-----BEGIN PRIVATE KEY-----\nMIIE\n"
                                          "-----END PRIVATE KEY-----\n",
                "kafka.ssl.key.password": "k"},
    "ssl_pkcs12": {"kafka.security.protocol": "SSL", "kafka.ssl.keystore.location": "/ks.p12",
                   "kafka.ssl.keystore.password": "k", "kafka.ssl.ca.location": "/ca.pem",
                   "kafka.ssl.crl.location": "/crl.pem"},
}


@pytest.mark.parametrize("name", sorted(SECURE_CONFIGS))
def test_default_and_secure_configs_keep_the_wire_fetcher(name):
    """The allow-list covers what txkafka itself puts in the executors' consumers and every
    security setting txkafka's connections apply: the default stays wire."""
    o = parse(**SECURE_CONFIGS[name], **{"kafka.group.id": "g", "kafka.client.id": "c",
                                         "kafka.isolation.level": "READ_UNCOMMITTED",
                                         "kafka.fetch.min.bytes": "1024",
                                         "kafka.max.partition.fetch.bytes": "1048576",
                                         "kafka.fetch.max.bytes": "52428800",
                                         "kafka.fetch.wait.max.ms": "200",
                                         "kafka.socket.timeout.ms": "30000",
                                         "kafka.debug": "security,conf",
                                         # a query carried over from Spark's kafka source
                                         "kafka.max.poll.records": "500",
                                         "kafka.max.poll.interval.ms": "300000"})
    assert o.fetcher == "wire"
    assert parse(fetcher="wire", **SECURE_CONFIGS[name]).fetcher == "wire"
    # What the executors get (consumer_config adds librdkafka's own settings) passes too.
    assert source_options.wire_fetcher_unsupported(o.consumer_config()) is None


def test_the_default_options_and_a_jks_stores_translation_keep_the_wire_fetcher():
    assert parse().fetcher == "wire"
    assert source_options.wire_fetcher_unsupported(parse().consumer_config()) is None
    # A JKS key and trust store become these (connector/client/keystores.py reads them).
    translated = {"bootstrap.servers": "h:9092", "security.protocol": "SSL",
                  "ssl.certificate.pem": PEM_CHAIN, "ssl.key.pem": "k", "ssl.ca.pem": PEM_CHAIN}
    assert source_options.wire_fetcher_unsupported(translated) is None


def test_isolation_level_is_read_in_any_case():
    o = parse(**{"kafka.isolation.level": "READ_Committed"})
    assert o.isolation_level == "read_committed"
    assert o.consumer_config()["isolation.level"] == "read_committed"
    assert parse(**{"kafka.isolation.level": " Read_Uncommitted "}).consumer_config()[
        "isolation.level"] == "read_uncommitted"
