import pytest

from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.kafka_config import describe_config, kafka_client_config


def test_prefix_stripped_and_other_options_ignored():
    conf = kafka_client_config({"kafka.bootstrap.servers": "h:1", "kafka.linger.ms": "5",
                                "subscribe": "t"})
    assert conf == {"bootstrap.servers": "h:1", "linger.ms": "5"}


def test_bootstrap_required():
    with pytest.raises(KafkaConfigError, match="kafka.bootstrap.servers"):
        kafka_client_config({"subscribe": "t"})


def test_java_only_key_names_the_librdkafka_equivalent():
    with pytest.raises(KafkaConfigError, match="kafka.ssl.ca.location"):
        kafka_client_config({"kafka.bootstrap.servers": "h:1",
                             "kafka.ssl.truststore.location": "/x.jks"})


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
