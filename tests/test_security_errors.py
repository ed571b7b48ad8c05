"""Unit tests: typed, secret-free errors for TLS/SASL/ACL failures (no broker needed).

The same failures are produced by a real secured Apache Kafka in
integration_tests/test_security_transport.py; these tests pin the translation rules.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from txkafka.connector.client.connection import SecurityConfig
from txkafka.connector.client.librdkafka_errors import (
    SecurityErrorProbe,
    is_security_error,
    translate_kafka_error,
)
from txkafka.connector.errors import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaConfigError,
    KafkaProtocolError,
)
from txkafka.connector.client.transactions import TransactionClient

SECRET = "hunter2-very-secret"
CONF = {
    "bootstrap.servers": "127.0.0.1:1",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "writer",
    "sasl.password": SECRET,
    "ssl.key.password": SECRET + "-key",
}


def _err(code: int, text: str) -> KafkaError:
    return KafkaError(code, text)


def test_sasl_failure_becomes_authentication_error_without_the_password():
    e = translate_kafka_error(
        _err(KafkaError._AUTHENTICATION, f"SASL authentication error: bad password {SECRET}"),
        CONF, action="init_transactions")
    assert isinstance(e, KafkaAuthenticationError)
    assert "SCRAM-SHA-512" in str(e) and "'writer'" in str(e) and "kafka.sasl.password" in str(e)
    assert SECRET not in str(e) and SECRET not in repr(e)


def test_tls_failures_name_the_options_to_check():
    ca = translate_kafka_error(_err(KafkaError._SSL, "SSL handshake failed: certificate verify "
                                    "failed"), CONF, action="connect")
    assert isinstance(ca, KafkaAuthenticationError) and "kafka.ssl.ca.location" in str(ca)
    cert = translate_kafka_error(
        _err(KafkaError._TRANSPORT, "Receive failed: error:0A000412:SSL routines::ssl/tls alert "
             "bad certificate: SSL alert number 42"), CONF, action="connect")
    assert isinstance(cert, KafkaAuthenticationError)
    assert "kafka.ssl.certificate.location" in str(cert)
    # A plain transport error (broker down) is not a security error.
    assert not is_security_error(_err(KafkaError._TRANSPORT, "Connection refused"))


def test_probe_turns_a_timeout_after_an_auth_failure_into_that_failure():
    probe = SecurityErrorProbe(CONF)
    probe.on_error(_err(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    timeout = KafkaException(_err(KafkaError._TIMED_OUT, "Timed out waiting for operation"))
    assert isinstance(translate_kafka_error(timeout, CONF, action="x", probe=probe),
                      KafkaProtocolError)
    probe.on_error(_err(KafkaError._AUTHENTICATION, f"Invalid username or password {SECRET}"))
    probe.on_error(_err(KafkaError._SSL, "later, different"))  # the first cause is kept
    e = translate_kafka_error(timeout, CONF, action="init_transactions", probe=probe)
    assert type(e) is KafkaAuthenticationError and "Invalid username" in str(e)
    assert SECRET not in str(e) and SECRET not in repr(probe)
    with pytest.raises(KafkaAuthenticationError):
        probe.raise_if_failed("init_transactions")


def test_authorization_errors_name_resource_and_operations():
    tid = translate_kafka_error(
        KafkaException(_err(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                            "Failed to find transaction coordinator: Transactional Id "
                            "authorization failed")),
        {**CONF, "transactional.id": "sink-7-p3-a0"}, action="init_transactions")
    assert isinstance(tid, KafkaAuthorizationError)
    assert "'sink-7-p3-a0'" in str(tid) and "WRITE and DESCRIBE" in str(tid)
    assert "--resource-pattern-type prefixed" in str(tid)

    topic = translate_kafka_error(
        _err(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Fetch from broker 1 failed: Broker: Topic "
             "authorization failed"), CONF, action="reading", topic="orders", role="reader")
    assert isinstance(topic, KafkaAuthorizationError)
    assert "'orders'" in str(topic) and "READ and DESCRIBE" in str(topic)
    assert "--operation READ --operation DESCRIBE --topic orders" in str(topic)

    wtopic = translate_kafka_error(_err(KafkaError.TOPIC_AUTHORIZATION_FAILED, "x"), CONF,
                                   action="writing", topic="out", role="writer")
    assert "WRITE and DESCRIBE" in str(wtopic)

    group = translate_kafka_error(_err(KafkaError.GROUP_AUTHORIZATION_FAILED, "FindCoordinator"),
                                  {**CONF, "group.id": "g1"}, action="reading")
    assert isinstance(group, KafkaAuthorizationError) and "Group:g1" in str(group)

    cluster = translate_kafka_error(_err(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "x"), CONF,
                                    action="init")
    assert "--operation IdempotentWrite --cluster" in str(cluster)  # kafka-acls.sh refuses IDEMPOTENT_WRITE


def test_bad_key_file_is_a_config_error():
    e = translate_kafka_error(
        KafkaException(_err(KafkaError._INVALID_ARG, "Failed to create producer: "
                            "ssl.key.location failed: error:0A080009:SSL routines::PEM lib")),
        CONF, action="creating the producer")
    assert isinstance(e, KafkaConfigError) and "kafka.ssl.key.password" in str(e)


def test_other_errors_stay_protocol_errors_and_are_redacted():
    e = translate_kafka_error(RuntimeError(f"boom {SECRET}"), CONF, action="x")
    assert isinstance(e, KafkaProtocolError) and SECRET not in str(e)


# ---------------------------------------------------------------- SecurityConfig / CA location


def test_ca_location_directory_missing_and_probe(tmp_path):
    base = {"security.protocol": "SSL"}
    # A directory of CA certificates is accepted (librdkafka accepts one too).
    SecurityConfig.from_kafka_config({**base, "ssl.ca.location": str(tmp_path)}).ssl_context()
    # "probe": the system CA store.
    SecurityConfig.from_kafka_config({**base, "ssl.ca.location": "probe"}).ssl_context()
    with pytest.raises(KafkaConfigError, match="kafka.ssl.ca.location"):
        SecurityConfig.from_kafka_config(
            {**base, "ssl.ca.location": str(tmp_path / "nope.pem")}).ssl_context()
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(KafkaConfigError, match="kafka.ssl.ca.location"):
        SecurityConfig.from_kafka_config({**base, "ssl.ca.location": str(garbage)}).ssl_context()


def test_security_config_repr_and_errors_hold_no_secret():
    sec = SecurityConfig.from_kafka_config(CONF)
    assert SECRET not in repr(sec) and SECRET not in str(sec)
    tc = TransactionClient(CONF)
    assert SECRET not in repr(tc)


# ------------------------------------------- TransactionClient: auth failures are not retried


class _RefusingConn:
    def __init__(self):
        self.calls = 0

    def __call__(self, host, port):
        self.calls += 1
        raise KafkaAuthenticationError("SASL SCRAM-SHA-512 authentication of user 'w' failed")


@pytest.mark.parametrize("call", ["end_txn", "describe"])
def test_authentication_failure_at_the_coordinator_is_raised_not_retried(call):
    tc = TransactionClient(CONF, timeout=20)
    tc._coordinators["tx-1"] = ("127.0.0.1", 9)  # a known coordinator, e.g. after a describe
    tc.find_coordinators = lambda ids: {i: ("127.0.0.1", 9) for i in ids}  # type: ignore
    refusing = _RefusingConn()
    tc._conn = refusing  # type: ignore[method-assign]
    with pytest.raises(KafkaAuthenticationError):
        if call == "end_txn":
            tc.end_txn("tx-1", 5, 0, True)
        else:
            tc.describe(["tx-1"])
    # Before the fix these were treated as "coordinator moved" and retried until the timeout.
    assert refusing.calls == 1


def test_every_kafka_acls_hint_names_an_operation_the_tool_accepts():
    """kafka-acls.sh takes an operation as one upper-case word (READ) or in PascalCase
    (DescribeConfigs); DESCRIBE_CONFIGS or IDEMPOTENT_WRITE are refused, so a hint that wrote
    them would send an operator to an error."""
    root = Path(__file__).resolve().parents[1]
    files = [*root.glob("connector/**/*.py"), *root.glob("txkafka/**/*.py"),
             *root.glob("python_datasource/*.py"), *root.glob("docs/*.md"), root / "README.md"]
    found = {(f.name, op) for f in files
             for op in re.findall(r"--operation ([A-Za-z_]+)", f.read_text())}
    assert {op for _, op in found} >= {"READ", "WRITE", "DESCRIBE", "IdempotentWrite"}
    bad = [(name, op) for name, op in found
           if not (re.fullmatch(r"[A-Z]+", op) or re.fullmatch(r"(?:[A-Z][a-z]+)+", op))]
    assert not bad, bad
