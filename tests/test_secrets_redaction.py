"""Unit tests: secrets stay out of error texts, reprs and messages about checkpoint locations."""

from __future__ import annotations

import pytest

from txkafka.connector.source.range_reader import PooledConsumer
from txkafka.connector.errors import CommitLogError
from txkafka.connector.secrets_redaction import REDACTED, redact_text, redact_uri
from txkafka.connector.sink.commit_log import SinkCommitLog


def test_a_partly_echoed_oauthbearer_config_is_redacted():
    """librdkafka 2.16 echoes only the unparsed rest of sasl.oauthbearer.config."""
    conf = {"sasl.oauthbearer.config": "principal=x bogus extension_tok=TOPSECRETVALUE99"}
    text = "Unrecognized sasl.oauthbearer.config beginning at: bogus extension_tok=TOPSECRETVALUE99"
    out = redact_text(text, conf)
    assert "TOPSECRETVALUE99" not in out and "extension_tok" not in out, out
    assert out.startswith("Unrecognized sasl.oauthbearer.config beginning at: "), out
    assert REDACTED in out


def test_one_token_of_a_multi_part_secret_is_redacted_wherever_it_appears():
    conf = {"sasl.oauthbearer.config": "principal=admin,scope=read  extension_a=S3cretTokenValue"}
    out = redact_text("invalid extension value S3cretTokenValue (check the token)", conf)
    assert "S3cretTokenValue" not in out and "check the token" in out, out


def test_the_echo_rule_needs_no_config():
    text = 'KafkaError{str="Unrecognized sasl.oauthbearer.config beginning at: a=b"}'
    out = redact_text(text, {})
    assert "a=b" not in out, out


def test_short_tokens_and_non_secret_values_are_kept():
    conf = {"sasl.oauthbearer.config": "a=1 bb", "sasl.username": "writer"}
    out = redact_text("user writer, a=1 bb", conf)
    assert out == "user writer, [redacted]", out
    assert redact_text("user writer, a=1 at bb", conf) == "user writer, a=1 at bb"


def test_pooled_consumer_repr_hides_the_consumer_config():
    conf = {"bootstrap.servers": "b:9092", "sasl.username": "reader",
            "sasl.password": "pooled-secret-pw"}
    pc = PooledConsumer(tuple(sorted(conf.items())), object())
    assert "pooled-secret-pw" not in repr(pc) and "pooled-secret-pw" not in str(pc)
    assert "PooledConsumer(" in repr(pc)


@pytest.mark.parametrize("uri, shown", [
    ("s3://AKIAEXAMPLE:wJal/rXUtn+FEMI@bucket/ck", "s3://[redacted]@bucket/ck"),
    ("gs://bucket/ck?access_token=ya29.SECRET#frag", "gs://bucket/ck?[redacted]"),
    ("hdfs://namenode:8020/ck", "hdfs://namenode:8020/ck"),
    ("/local/ck", "/local/ck"),
])
def test_redact_uri(uri, shown):
    assert redact_uri(uri) == shown


def test_commit_log_error_does_not_echo_checkpoint_credentials():
    uri = "bogus://AKIAEXAMPLEKEY:S3CR3T/vAlUe@bucket/ck?token=T0KENVALUE"
    with pytest.raises(CommitLogError) as err:
        SinkCommitLog(uri)
    text = f"{err.value} {err.value!r}"
    for secret in ("AKIAEXAMPLEKEY", "S3CR3T", "vAlUe", "T0KENVALUE"):
        assert secret not in text, text
    assert "bogus://[redacted]@bucket/ck" in text, text


def test_the_unsecured_jwt_principal_and_scope_are_not_hidden_in_messages():
    """sasl.oauthbearer.config names the principal (OAUTHBEARER's user name) and the scope: a
    message about principal 'writer' or topic 'kafka-out' stays readable; extension values and
    the whole value stay hidden."""
    conf = {"sasl.oauthbearer.config": "principal=writer scope=kafka lifeSeconds=3600 "
                                       "extension_traceKey=S3cretExtValue"}
    text = ("principal 'writer' may not write topic 'kafka-out'; extension S3cretExtValue; "
            + conf["sasl.oauthbearer.config"])
    out = redact_text(text, conf)
    assert out == ("principal 'writer' may not write topic 'kafka-out'; extension [redacted]; "
                   "[redacted]"), out


def test_key_store_paths_show_and_its_secrets_do_not():
    """A keystore's location, type and certificate chain are no secrets: an error about the file
    names it. Its password and PEM key (and the key's password) stay hidden."""
    from txkafka.connector.secrets_redaction import is_secret_key, redact_config

    conf = {"ssl.keystore.location": "/etc/kafka/client.p12", "ssl.keystore.type": "PKCS12",
            "ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----MIIBpublic",
            "ssl.keystore.password": "ks-hunter2", "ssl.keystore.key": "-----BEGIN PRIVATE KEY"
            "-----MIIEsecretkey", "ssl.key.password": "key-hunter2",
            "ssl.truststore.password": "ts-hunter2", "ssl.key.pem": "MIIEpemsecret"}
    text = redact_text("Failed to open ssl.keystore.location /etc/kafka/client.p12 (PKCS12, "
                       "password ks-hunter2, key -----BEGIN PRIVATE KEY-----MIIEsecretkey, "
                       "key-hunter2, ts-hunter2, MIIEpemsecret)", conf)
    assert "/etc/kafka/client.p12" in text and "PKCS12" in text, text
    for secret in ("ks-hunter2", "MIIEsecretkey", "key-hunter2", "ts-hunter2", "MIIEpemsecret"):
        assert secret not in text, text
    shown = redact_config(conf)
    assert shown["ssl.keystore.location"] == "/etc/kafka/client.p12"
    assert shown["ssl.keystore.certificate.chain"].endswith("MIIBpublic")
    assert [k for k in conf if is_secret_key("kafka." + k)] == [
        "ssl.keystore.password", "ssl.keystore.key", "ssl.key.password",
        "ssl.truststore.password", "ssl.key.pem"]


@pytest.mark.parametrize("name", [
    "kafka.sasl.password", "kafka.sasl.jaas.config", "kafka.ssl.key.password",
    "kafka.ssl.keystore.password", "kafka.ssl.truststore.password", "kafka.ssl.keystore.key",
    "kafka.ssl.key.pem", "kafka.sasl.oauthbearer.client.secret", "kafka.sasl.oauthbearer.config",
    "kafka.sasl.oauthbearer.assertion.private.key.passphrase",
    # secrets of settings users pass along with Kafka's (Schema Registry, object stores, ...)
    "basic.auth.user.info", "schema.registry.basic.auth.user.info", "fs.s3a.access.key",
    "spark.hadoop.fs.s3a.secret.key", "api.key", "apiKey", "db.passwd", "db.pwd",
])
def test_every_secret_name_is_a_secret(name):
    from txkafka.connector.secrets_redaction import is_secret_key

    assert is_secret_key(name)


@pytest.mark.parametrize("name", [
    "kafka.ssl.key.location", "kafka.ssl.keystore.location", "kafka.ssl.keystore.type",
    "kafka.ssl.keystore.certificate.chain", "kafka.ssl.ca.location", "kafka.sasl.username",
    "kafka.sasl.mechanism", "kafka.sasl.oauthbearer.client.id", "kafka.sasl.kerberos.keytab",
    "kafka.bootstrap.servers", "transactionalIdPrefix", "checkpointLocation",
])
def test_names_and_paths_messages_must_show_are_no_secrets(name):
    from txkafka.connector.secrets_redaction import is_secret_key

    assert not is_secret_key(name)


def test_a_command_line_keeps_its_shape_without_secret_values():
    """What a result file records of the command that made it (txkafka bench)."""
    from txkafka.connector.secrets_redaction import redact_command_line

    words = ["txkafka", "bench", "-b", "h:9092", "-X", "sasl.username=bob",
             "-X", "sasl.password=pw=with=equals", "-Xssl.key.password=KeyPw123",
             "--spark-conf", "spark.hadoop.fs.s3a.secret.key=S3SecretAbc",
             "--conf=sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
             'required username="bob" password="JaasPw123";', "--command-config", "/etc/c.conf"]
    assert redact_command_line(words) == (
        "txkafka bench -b h:9092 -X sasl.username=bob -X sasl.password=[redacted] "
        "-Xssl.key.password=[redacted] --spark-conf spark.hadoop.fs.s3a.secret.key=[redacted] "
        "--conf=sasl.jaas.config=[redacted] --command-config /etc/c.conf")


_ENDPOINT = "https://idp.example/oauth2/token?sig=EndpointSig4711"


def _reader_client(options: dict) -> None:
    from txkafka.connector.source.offset_reader import KafkaOffsetReader
    from txkafka.connector.source.options import parse_source_options

    admin = KafkaOffsetReader(parse_source_options({**options, "subscribe": "t"},
                                                   streaming=True))._admin()
    admin.poll(0.2)  # serves the log queue


def _executor_consumer(options: dict) -> None:
    from txkafka.connector.source.options import parse_source_options
    from txkafka.connector.source.range_reader import ConsumerPool, FetchTask

    opts = parse_source_options({**options, "subscribe": "t"}, streaming=True)
    pooled = ConsumerPool().acquire(FetchTask("t", 0, 0, 1,
                                              tuple(sorted(opts.consumer_config().items())),
                                              1000, True, False))
    pooled.consumer.poll(0.2)  # serves the log queue
    pooled.consumer.close()


def _sink_producer(options: dict) -> None:
    from txkafka.connector.sink.options import SinkConfig
    from txkafka.connector.sink.task_writer import (_LIBRDKAFKA_LOG, _new_producer,
                                                    _ProducerProbe, producer_config)

    cfg = SinkConfig.from_options({**options, "topic": "t", "producer": "librdkafka",
                                   "deliveryGuarantee": "at_least_once"}, streaming=True)
    _new_producer(producer_config(cfg, _ProducerProbe(cfg.kafka), None, _LIBRDKAFKA_LOG)).poll(0.2)


@pytest.mark.parametrize("client", [_reader_client, _executor_consumer, _sink_producer])
def test_librdkafka_log_lines_reach_python_logging_redacted(client, caplog):
    """librdkafka hides only the settings it marks sensitive: its configuration dump
    (kafka.debug=conf, routed to the logger txkafka.librdkafka) prints the token endpoint's URL,
    whose query may hold a credential. Every client txkafka routes that way passes it redacted."""
    options = {"kafka.bootstrap.servers": "127.0.0.1:1", "kafka.debug": "conf",
               "kafka.sasl.oauthbearer.token.endpoint.url": _ENDPOINT}
    with caplog.at_level("DEBUG", logger="txkafka.librdkafka"):
        client(options)
    lines = [r.getMessage() for r in caplog.records if r.name == "txkafka.librdkafka"]
    assert any("sasl.oauthbearer.token.endpoint.url = [redacted]" in line for line in lines)
    assert not [line for line in lines if "EndpointSig4711" in line]


def test_the_spark_redaction_setting_in_the_docs_is_the_rule():
    """docs/operations-security.md gives users txkafka's rule as Spark's
    spark.sql.redaction.options.regex, which Spark applies to names and values alike."""
    import re
    from pathlib import Path

    from txkafka.connector.secrets_redaction import SPARK_OPTIONS_REDACTION_REGEX

    doc = (Path(__file__).resolve().parent.parent / "docs" / "operations-security.md").read_text()
    shown = re.search(r'"spark\.sql\.redaction\.options\.regex",\s*r"([^"]+)"', doc)
    assert shown is not None and shown.group(1) == SPARK_OPTIONS_REDACTION_REGEX
    rule = re.compile(SPARK_OPTIONS_REDACTION_REGEX)
    for name in ("kafka.ssl.keystore.key", "kafka.ssl.key.pem", "kafka.sasl.oauthbearer.config",
                 "kafka.sasl.password", "url"):
        assert rule.search(name), name
    assert not rule.search("kafka.ssl.keystore.location")
