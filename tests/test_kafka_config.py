import re

import pytest

from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.client.config import (
    check_client_config,
    describe_config,
    kafka_client_config,
)


def test_prefix_stripped_and_other_options_ignored():
    conf = kafka_client_config({"kafka.bootstrap.servers": "h:1", "kafka.linger.ms": "5",
                                "subscribe": "t"})
    assert conf == {"bootstrap.servers": "h:1", "linger.ms": "5"}


def test_bootstrap_required():
    with pytest.raises(KafkaConfigError, match="kafka.bootstrap.servers"):
        kafka_client_config({"subscribe": "t"})


def test_java_only_key_names_the_librdkafka_equivalent():
    with pytest.raises(KafkaConfigError, match="use kafka.ssl.key.password"):
        kafka_client_config({"kafka.bootstrap.servers": "h:1",
                             "kafka.ssl.key.password.location": "/pw"})


def test_owned_keys_rejected_with_reason():
    with pytest.raises(KafkaConfigError, match="kafka.value.deserializer"):
        kafka_client_config({"kafka.bootstrap.servers": "h:1", "kafka.value.deserializer": "x"})
    with pytest.raises(KafkaConfigError, match="startingOffsets"):
        kafka_client_config({"kafka.bootstrap.servers": "h:1", "kafka.auto.offset.reset": "x"},
                            owned={"auto.offset.reset": "use startingOffsets"})


def test_jaas_config_translated_for_plain_and_scram():
    conf = kafka_client_config({
        "kafka.bootstrap.servers": "h:1",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                  'required username="bob" password="p\\"w";',
    })
    assert conf["sasl.username"] == "bob"
    assert conf["sasl.password"] == 'p"w'
    with pytest.raises(KafkaConfigError, match="PlainLoginModule"):
        kafka_client_config({"kafka.bootstrap.servers": "h:1",
                             "kafka.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"})


def test_describe_config_redacts_secrets():
    text = describe_config({"sasl.password": "hunter2", "ssl.key.password": "k3y",
                            "bootstrap.servers": "h:1"})
    assert "hunter2" not in text and "k3y" not in text and "h:1" in text


def test_java_names_librdkafka_knows_are_renamed_or_passed_through():
    conf = kafka_client_config({"kafka.bootstrap.servers": "h:1", "kafka.delivery.timeout.ms": "30000",
                                "kafka.client.dns.lookup": "use_all_dns_ips",
                                "kafka.max.poll.interval.ms": "300000"})
    assert conf["message.timeout.ms"] == "30000" and "delivery.timeout.ms" not in conf
    assert conf["client.dns.lookup"] == "use_all_dns_ips"
    assert conf["max.poll.interval.ms"] == "300000"
    with pytest.raises(KafkaConfigError, match="kafka.delivery.timeout.ms.*kafka.message.timeout.ms"):
        kafka_client_config({"kafka.bootstrap.servers": "h:1", "kafka.message.timeout.ms": "1000",
                             "kafka.delivery.timeout.ms": "30000"})


def test_an_empty_host_check_algorithm_is_javas_off_switch():
    # Java clients (and so Spark's connector) take "" to turn the host name check off;
    # librdkafka refuses an empty value, so it becomes "none" for every client.
    opts = {"kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "SSL",
            "kafka.ssl.endpoint.identification.algorithm": " "}
    conf = kafka_client_config(opts)
    assert conf["ssl.endpoint.identification.algorithm"] == "none"
    check_client_config(conf, "producer")
    from txkafka.connector.client.connection import SecurityConfig
    assert SecurityConfig.from_kafka_config(conf).check_hostname is False


@pytest.mark.parametrize("key, named", [
    ("max.block.ms", "kafka.message.timeout.ms"),
    ("fetch.max.wait.ms", "kafka.fetch.wait.max.ms"),
    ("max.request.size", "kafka.message.max.bytes"),
    ("send.buffer.bytes", "kafka.socket.send.buffer.bytes"),
    ("ssl.enabled.protocols", "TLS version"),
    ("ssl.provider", "kafka.ssl.providers, a different setting, loads OpenSSL 3 providers"),
])
def test_more_java_only_keys_name_what_to_do(key, named):
    with pytest.raises(KafkaConfigError, match=re.escape(named)) as exc:
        kafka_client_config({"kafka.bootstrap.servers": "h:1", f"kafka.{key}": "1"})
    assert f"kafka.{key}" in str(exc.value)


def test_client_check_names_the_option_librdkafka_rejects_and_hides_secrets():
    base = {"bootstrap.servers": "127.0.0.1:1", "sasl.password": "hunter2-secret",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u"}
    with pytest.raises(KafkaConfigError, match="'kafka.acks'") as exc:
        check_client_config({**base, "enable.idempotence": True, "acks": "1"}, "producer")
    assert "hunter2-secret" not in str(exc.value)
    with pytest.raises(KafkaConfigError, match="'kafka.receive.message.max.bytes'"):
        check_client_config({**base, "group.id": "g", "receive.message.max.bytes": "4000000"},
                            "consumer")
    with pytest.raises(KafkaConfigError, match="property 'kafka.no.such.key'"):
        check_client_config({**base, "no.such.key": "1"}, "producer")
    check_client_config({**base, "group.id": "g"}, "consumer")  # valid: no error, no broker needed


@pytest.mark.parametrize("key, value, shown", [
    ("max.in.flight.requests.per.connection", "10", "'kafka.max.in.flight.requests.per.connection' "
                                                    "must be set <= 5"),
    ("message.send.max.retries", "0", "'kafka.message.send.max.retries' must be set >= 1"),
    ("retries", "0", "'kafka.retries' must be set >= 1"),
])
def test_client_check_names_the_key_given_not_librdkafkas_alias(key, value, shown):
    """librdkafka's errors use its own names (`max.in.flight`, `retries`) and blame
    enable.idempotence, which txkafka sets: the message names what the user set."""
    conf = {"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": True, key: value}
    with pytest.raises(KafkaConfigError) as exc:
        check_client_config(conf, "producer")
    text = str(exc.value)
    assert shown in text and "because txkafka always enables idempotence" in text, text
    assert "enable.idempotence" not in text and "'kafka.max.in.flight'" not in text, text


# ------------------------------------------------------- Java's key and trust store settings

def _cfg(**opts: str) -> dict:
    return kafka_client_config({"kafka.bootstrap.servers": "h:1",
                                **{f"kafka.{k}": v for k, v in opts.items()}})


def test_pem_trust_store_and_pkcs12_key_store_are_translated():
    conf = _cfg(**{"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
                   "ssl.keystore.type": "pkcs12", "ssl.keystore.location": "/ks.p12",
                   "ssl.keystore.password": "pw"})
    assert conf == {"bootstrap.servers": "h:1", "ssl.ca.location": "/ca.pem",
                    "ssl.keystore.location": "/ks.p12", "ssl.keystore.password": "pw"}
    # KIP-651's inline PEM stores are librdkafka's inline PEM settings.
    conf = _cfg(**{"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "CERT",
                   "ssl.keystore.key": "KEY", "ssl.truststore.type": "PEM",
                   "ssl.truststore.certificates": "CA"})
    assert conf == {"bootstrap.servers": "h:1", "ssl.certificate.pem": "CERT",
                    "ssl.key.pem": "KEY", "ssl.ca.pem": "CA"}
    # Agreeing twice is fine; disagreeing names both options and no value.
    assert _cfg(**{"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
                   "ssl.ca.location": "/ca.pem"})["ssl.ca.location"] == "/ca.pem"
    with pytest.raises(KafkaConfigError, match="'kafka.ssl.keystore.key' and 'kafka.ssl.key.pem'"
                       ) as info:
        _cfg(**{"ssl.keystore.key": "KEY-A-secret", "ssl.key.pem": "KEY-B-secret"})
    assert "secret" not in str(info.value)


@pytest.mark.parametrize("opts, needle", [
    ({"ssl.truststore.location": "/nonexistent/t.jks"},
     "could not read kafka.ssl.truststore.location='/nonexistent/t.jks'"),
    ({"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
      "ssl.truststore.password": "x"}, "a PEM trust store has no password"),
    ({"ssl.truststore.password": "x"}, "without kafka.ssl.truststore.location"),
    ({"ssl.truststore.type": "BKS"}, "is not JKS, PKCS12 or PEM"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem"},
     "kafka.ssl.certificate.location and kafka.ssl.key.location"),
    ({"ssl.keystore.type": "BCFKS"}, "is not JKS, PKCS12 or PEM"),
])
def test_store_settings_that_cannot_work_are_refused_naming_the_option(opts, needle):
    with pytest.raises(KafkaConfigError) as info:
        _cfg(**opts)
    assert needle in str(info.value)
