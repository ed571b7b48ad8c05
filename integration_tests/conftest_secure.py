"""The ``secure_kafka`` fixture: a secured single-node Apache Kafka (TLS, SASL, ACLs) per session.

Imported by integration_tests/conftest.py. Always the native embedded broker (the tests configure its
listeners, JAAS and authorizer), whatever TXKAFKA_BROKER says. A broker that cannot start fails the
tests that need it, with its log tail; nothing skips.
"""

from __future__ import annotations

import pytest

from integration_tests.secure_kafka import PkiError, SecureKafka
from txkafka.embedded_kafka import EmbeddedKafkaError


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory) -> SecureKafka:
    """Listeners SSL / SASL_PLAINTEXT / SASL_SSL, users admin (super user), reader, writer, stranger.

    ``secure_kafka.client_config(user, protocol, mechanism)`` gives librdkafka settings,
    ``kafka_options(...)`` the same as Spark ``kafka.*`` options, ``target(...)`` a KafkaTarget,
    ``grant_reader``/``grant_writer`` the ACLs. Principals start with no ACLs.
    """
    sk = SecureKafka(tmp_path_factory.mktemp("secure-kafka"))
    try:
        sk.start(timeout=240)
    except (EmbeddedKafkaError, PkiError) as e:
        sk.destroy()
        pytest.fail(f"the secured Kafka broker did not start:\n{e}", pytrace=False)
    try:
        yield sk
    finally:
        sk.destroy()
