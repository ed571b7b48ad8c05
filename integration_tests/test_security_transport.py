"""The commit path on a secured Apache Kafka 4.3: TLS, SASL PLAIN/SCRAM, the StandardAuthorizer.

For each transport, the writer principal's librdkafka producer opens a transaction and pre-commits
(flush, left open) as a task does; the driver-side TransactionClient, with the same settings and the
same principal, describes it and commits it with EndTxn; the reader principal's read_committed
consumer then sees the records. Then each failure a user can cause (wrong password, wrong CA, no
client certificate, wrong key password, a missing ACL) must give a typed error that says what to fix,
with nothing committed and no secret in any message or log.

The broker principals start with NO ACLs (allow.everyone.if.no.acl.found=false); every test grants
exactly what it needs, so a passing test is also the proof of the minimal ACL set.
"""

from __future__ import annotations

import json
import logging
import time
import traceback

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from integration_tests.kafka_helpers import QUIET, unique
from integration_tests.secure_kafka import allow
from txkafka.connector.client.connection import BrokerConnection, SecurityConfig
from txkafka.connector.client.librdkafka_errors import SecurityErrorProbe, translate_kafka_error
from txkafka.connector.errors import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaConfigError,
    TxKafkaError,
    UnsupportedBrokerError,
)
from txkafka.connector.client.config import describe_config, kafka_client_config
from txkafka.connector.client.transactions import TransactionClient
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.sink.start_checks import validate_at_start
from txkafka.kafka_admin import VERIFY_GROUP_PREFIX

pytestmark = pytest.mark.kafka

TRANSPORTS = [
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-256"),
]
WRONG_PASSWORD = "wrongPw9f8e7d6c5b4a"


def _label(protocol: str, mechanism: str | None) -> str:
    return protocol if mechanism is None else f"{protocol}-{mechanism}"


@pytest.fixture(scope="module")
def reader_groups(secure_kafka) -> str:
    """KafkaTarget.read_all reads through txkafka.verify, whose group ids share one prefix."""
    secure_kafka.create_acls([allow("reader", ResourceType.GROUP, VERIFY_GROUP_PREFIX,
                                    AclOperation.READ, ResourcePatternType.PREFIXED)])
    return VERIFY_GROUP_PREFIX


# ------------------------------------------------------------------------------ helpers


class PreCommitted:
    """A task's pre-committed transaction: flushed, every delivery checked, left open."""

    def __init__(self, conf: dict, transactional_id: str, topic: str, values: list[bytes],
                 partitions: int, probe: SecurityErrorProbe | None = None,
                 logger: logging.Logger = QUIET, debug: str | None = None) -> None:
        self.transactional_id = transactional_id
        self._stats: dict = {}
        delivery_errors: list = []
        pconf = {
            **conf, "transactional.id": transactional_id, "partitioner": "murmur2_random",
            "linger.ms": 5, "statistics.interval.ms": 100, "stats_cb": self._on_stats,
            "logger": logger,
        }
        if probe is not None:
            pconf["error_cb"] = probe.on_error
        if debug:
            pconf["debug"] = debug
        self.producer = Producer(pconf)
        self.producer.init_transactions(30)
        self.producer.begin_transaction()
        for i, v in enumerate(values):
            self.producer.produce(topic, v, partition=i % partitions,
                                  on_delivery=lambda err, msg: err and delivery_errors.append(err))
        assert self.producer.flush(30) == 0
        assert not delivery_errors, delivery_errors
        # Producer id and epoch are only in librdkafka's statistics (eos.*).
        deadline = time.monotonic() + 20
        while not (self._stats.get("txn_state") == "InTransaction"
                   and self._stats.get("producer_id", -1) >= 0):
            assert time.monotonic() < deadline, f"no eos statistics: {self._stats}"
            self.producer.poll(0.05)
        self.producer_id = int(self._stats["producer_id"])
        self.producer_epoch = int(self._stats["producer_epoch"])

    def _on_stats(self, raw: str) -> None:
        self._stats = json.loads(raw).get("eos", {})


def _failing_init(conf: dict, transactional_id: str, probe: SecurityErrorProbe,
                  logger: logging.Logger = QUIET, debug: str | None = None) -> TxKafkaError:
    """init_transactions on a connection that TLS/SASL refuses: librdkafka only times out; the
    cause arrives at error_cb. Returns the translated error (bounded: about 3-20 s)."""
    pconf = {**conf, "transactional.id": transactional_id, "error_cb": probe.on_error,
             "logger": logger}
    if debug:
        pconf["debug"] = debug
    p = Producer(pconf)
    with pytest.raises(KafkaException) as info:
        p.init_transactions(3)
    deadline = time.monotonic() + 20
    while probe.security_error is None and time.monotonic() < deadline:
        p.poll(0.2)  # error_cb runs only inside poll
    return translate_kafka_error(info.value, conf, action="init_transactions",
                                 transactional_id=transactional_id, probe=probe)


def _assert_no_secret(text: str, secrets: list[str]) -> None:
    # Not `assert s not in text`: pytest would print the secret when it fails.
    leaked = [f"{s[:4]}..." for s in secrets if s in text]
    assert not leaked, f"secret(s) found in the collected text: {leaked}"


def _raises(exc_type, fn, *args, **kwargs):
    with pytest.raises(exc_type) as info:
        fn(*args, **kwargs)
    return info.value


# ---------------------------------------------------------------------- the commit path


@pytest.mark.parametrize("protocol, mechanism", TRANSPORTS,
                         ids=[_label(p, m) for p, m in TRANSPORTS])
def test_driver_commits_the_task_transaction(secure_kafka, reader_groups, protocol, mechanism):
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("sec"), partitions=2)
    prefix = unique("sink")
    sk.grant_writer("writer", topic, prefix)
    sk.grant_reader("reader", topic)
    writer_conf = sk.client_config("writer", protocol, mechanism)
    values = [f"{_label(protocol, mechanism)}-{i}".encode() for i in range(6)]

    task = PreCommitted(writer_conf, f"{prefix}-p0-a0", topic, values, partitions=2)
    reader = sk.target("reader", protocol, mechanism)
    assert reader.read_all(topic) == []  # open: read_committed sees nothing yet

    with TransactionClient(writer_conf, timeout=30) as tc:
        desc = tc.describe([task.transactional_id])[task.transactional_id]
        assert desc.state == "Ongoing"
        assert (desc.producer_id, desc.producer_epoch) == (task.producer_id, task.producer_epoch)
        assert list(desc.partitions) == [topic] and sorted(desc.partitions[topic]) == [0, 1]
        # ListTransactions without any cluster ACL: the broker lists the ids we may DESCRIBE.
        listed = tc.list_transactions(prefix=prefix)
        assert [t.transactional_id for t in listed] == [task.transactional_id]
        assert tc.end_txn(task.transactional_id, task.producer_id, task.producer_epoch,
                          commit=True) == 0

    assert sorted(r.value for r in reader.read_all(topic)) == sorted(values)


OAUTH_TRANSPORTS = [("SASL_PLAINTEXT", False), ("SASL_SSL", False), ("SASL_PLAINTEXT", True),
                    ("SASL_SSL", True)]


@pytest.mark.parametrize("protocol, oidc", OAUTH_TRANSPORTS,
                         ids=[f"{p}-{'oidc' if o else 'unsecured-jwt'}" for p, o in OAUTH_TRANSPORTS])
def test_driver_commits_the_task_transaction_over_oauthbearer(secure_kafka, reader_groups, protocol,
                                                              oidc):
    """OAUTHBEARER with librdkafka's own options: the task's producer (librdkafka) and the driver's
    commit client get tokens for the same principal, from librdkafka's unsecured JWT options or
    from an OIDC token endpoint (client credentials); the broker's default validator makes the
    token's sub the principal, which the ACLs are for. The commit client fetches one token for
    all its connections."""
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("sec-oauth"), partitions=2)
    prefix = unique("sink-oauth")
    sk.grant_writer("writer", topic, prefix)
    sk.grant_reader("reader", topic)
    writer_conf = sk.client_config("writer", protocol, "OAUTHBEARER", oidc=oidc)
    values = [f"oauth-{protocol}-{oidc}-{i}".encode() for i in range(6)]
    task = PreCommitted(writer_conf, f"{prefix}-p0-a0", topic, values, partitions=2)
    reader = sk.target("reader", protocol, "OAUTHBEARER", oidc=oidc)
    assert reader.read_all(topic) == []

    fetched = sk.token_endpoint.requests.get("writer", 0)
    with TransactionClient(writer_conf, timeout=30) as tc:
        desc = tc.describe([task.transactional_id])[task.transactional_id]
        assert desc.state == "Ongoing"
        assert (desc.producer_id, desc.producer_epoch) == (task.producer_id, task.producer_epoch)
        listed = tc.list_transactions(prefix=prefix)
        assert [t.transactional_id for t in listed] == [task.transactional_id]
        assert tc.end_txn(task.transactional_id, task.producer_id, task.producer_epoch,
                          commit=True) == 0
    assert sk.token_endpoint.requests.get("writer", 0) - fetched == (1 if oidc else 0)
    assert sorted(r.value for r in reader.read_all(topic)) == sorted(values)


def test_oauthbearer_failures_are_typed_commit_nothing_and_show_no_secret(secure_kafka,
                                                                          reader_groups):
    """A client secret the identity provider refuses, a token the broker refuses (signed with a
    key it cannot check: Kafka's JSON error, then SASL_AUTHENTICATION_FAILED after the client's
    ^A) and a valid token of a principal without ACLs: each a typed error naming what to check,
    the transaction still open, no secret and no token in the message."""
    sk = secure_kafka
    endpoint = sk.token_endpoint
    topic = sk.admin_target.create_topic(unique("sec-oauth-fail"), partitions=1)
    prefix = unique("sink-oauth-fail")
    sk.grant_writer("writer", topic, prefix)
    sk.grant_reader("reader", topic)
    writer_conf = sk.client_config("writer", "SASL_SSL", "OAUTHBEARER", oidc=True)
    task = PreCommitted(writer_conf, f"{prefix}-p0-a0", topic, [b"a", b"b"], partitions=1)
    reader = sk.target("reader", "SASL_SSL", "SCRAM-SHA-512")
    commit = (task.transactional_id, task.producer_id, task.producer_epoch)
    texts: list[str] = []

    wrong = sk.client_config("writer", "SASL_SSL", "OAUTHBEARER", oidc=True,
                             password=WRONG_PASSWORD)
    with TransactionClient(wrong, timeout=15) as tc:
        err = _raises(KafkaAuthenticationError, tc.end_txn, *commit, commit=True)
    texts.append(str(err))
    assert "HTTP 401 (invalid_client: Client authentication failed)" in str(err)
    assert "kafka.sasl.oauthbearer.client.secret" in str(err)

    endpoint.forged.add("stranger")
    try:
        forged = sk.client_config("stranger", "SASL_SSL", "OAUTHBEARER", oidc=True)
        with TransactionClient(forged, timeout=15) as tc:
            err = _raises(KafkaAuthenticationError, tc.end_txn, *commit, commit=True)
    finally:
        endpoint.forged.discard("stranger")
    texts.append(str(err))
    assert "principal 'stranger'" in str(err) and "SASL_AUTHENTICATION_FAILED" in str(err)
    assert "(SASL_AUTHENTICATION_FAILED, status='invalid_token')" in str(err), str(err)
    assert "kafka.sasl.oauthbearer.token.endpoint.url" in str(err)

    stranger = sk.client_config("stranger", "SASL_PLAINTEXT", "OAUTHBEARER")
    with TransactionClient(stranger, timeout=15) as tc:
        err = _raises(KafkaAuthorizationError, tc.end_txn, *commit, commit=True)
    texts.append(str(err))
    assert task.transactional_id in str(err)

    assert reader.read_all(topic) == []  # nothing committed
    with TransactionClient(writer_conf, timeout=30) as tc:
        assert tc.describe([task.transactional_id])[task.transactional_id].state == "Ongoing"
        assert tc.end_txn(*commit, commit=False) == 0
    assert reader.read_all(topic) == []
    for text in texts:
        _assert_no_secret(text, [*sk.secret_values(), WRONG_PASSWORD, *endpoint.issued])
        assert "eyJ" not in text  # no JWT of any kind (librdkafka-style unsecured ones too)


def test_pkcs12_keystore_identifies_the_writer_to_tasks_and_driver(secure_kafka, reader_groups):
    """The client certificate as a PKCS#12 keystore (kafka.ssl.keystore.location, what Spark users
    of mutual TLS hold): librdkafka's producer and the driver's commit client both present it on
    the SSL listener, where it is the principal; a wrong keystore password is a config error that
    names the option and not the password."""
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("sec-p12"), partitions=2)
    prefix = unique("sink-p12")
    sk.grant_writer("writer", topic, prefix)
    sk.grant_reader("reader", topic)
    writer_conf = sk.client_config("writer", "SSL", keystore="pkcs12")
    assert "ssl.certificate.location" not in writer_conf
    values = [f"p12-{i}".encode() for i in range(6)]
    task = PreCommitted(writer_conf, f"{prefix}-p0-a0", topic, values, partitions=2)
    reader = sk.target("reader", "SSL", keystore="pkcs12")
    assert reader.read_all(topic) == []
    with TransactionClient(writer_conf, timeout=30) as tc:
        desc = tc.describe([task.transactional_id])[task.transactional_id]
        assert desc.state == "Ongoing"
        assert (desc.producer_id, desc.producer_epoch) == (task.producer_id, task.producer_epoch)
        assert tc.end_txn(task.transactional_id, task.producer_id, task.producer_epoch,
                          commit=True) == 0
    assert sorted(r.value for r in reader.read_all(topic)) == sorted(values)

    wrong = {**writer_conf, "ssl.keystore.password": WRONG_PASSWORD}
    with TransactionClient(wrong, timeout=10) as tc:
        err = _raises(KafkaConfigError, tc.describe, [task.transactional_id])
    assert "kafka.ssl.keystore.password" in str(err)
    _assert_no_secret(str(err), [*sk.secret_values(), WRONG_PASSWORD])
    # The same keystore without the certificate's principal behind it: the stranger's keystore is
    # a valid identity with no ACL, refused by the broker, not by the client.
    stranger = sk.client_config("stranger", "SSL", keystore="pkcs12")
    with TransactionClient(stranger, timeout=15) as tc:
        with pytest.raises(KafkaAuthorizationError):
            tc.describe([task.transactional_id])


def test_list_transactions_shows_only_ids_the_principal_may_describe(secure_kafka):
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("sec"))
    mine, theirs = unique("mine"), unique("theirs")
    sk.grant_writer("writer", topic, mine)
    admin_conf = sk.client_config("admin", "SASL_SSL", "SCRAM-SHA-512")
    other = PreCommitted(admin_conf, f"{theirs}-0", topic, [b"x"], 1)
    own = PreCommitted(sk.client_config("writer", "SASL_SSL", "SCRAM-SHA-512"), f"{mine}-0",
                       topic, [b"y"], 1)
    with TransactionClient(sk.client_config("writer", "SASL_SSL", "SCRAM-SHA-512")) as tc:
        ids = {t.transactional_id for t in tc.list_transactions()}
    assert own.transactional_id in ids and other.transactional_id not in ids
    with TransactionClient(admin_conf) as tc:  # super user sees both; clean up
        assert {own.transactional_id, other.transactional_id} <= {
            t.transactional_id for t in tc.list_transactions()}
        for t in (own, other):
            assert tc.end_txn(t.transactional_id, t.producer_id, t.producer_epoch, False) == 0


# -------------------------------------------------------------------- authentication


@pytest.mark.parametrize("protocol, mechanism", [("SASL_SSL", "SCRAM-SHA-512"),
                                                 ("SASL_PLAINTEXT", "PLAIN")])
def test_wrong_password(secure_kafka, protocol, mechanism):
    sk = secure_kafka
    bad = sk.client_config("writer", protocol, mechanism, password=WRONG_PASSWORD)

    e = _raises(KafkaAuthenticationError, TransactionClient(bad, timeout=10).describe, ["any-id"])
    assert f"SASL {mechanism} authentication of user 'writer'" in str(e)
    assert "kafka.sasl.username/password" in str(e)

    probe = SecurityErrorProbe(bad)
    lib = _failing_init(bad, unique("sink"), probe)
    assert isinstance(lib, KafkaAuthenticationError), lib
    assert f"SASL {mechanism} authentication of user 'writer' failed" in str(lib)
    assert "kafka.sasl.password" in str(lib)
    for err in (e, lib):
        text = str(err) + repr(err)
        _assert_no_secret(text, [WRONG_PASSWORD, sk.passwords["writer"]])


@pytest.mark.parametrize("protocol, mechanism", [("SASL_SSL", "SCRAM-SHA-512"), ("SSL", None)])
def test_wrong_ca(secure_kafka, protocol, mechanism):
    sk = secure_kafka
    bad = sk.client_config("writer", protocol, mechanism, ca=sk.pki.other_ca)
    e = _raises(KafkaAuthenticationError, TransactionClient(bad, timeout=10).describe, ["any-id"])
    assert "TLS handshake" in str(e) and "CERTIFICATE_VERIFY_FAILED" in str(e)
    assert "kafka.ssl.ca.location" in str(e)

    lib = _failing_init(bad, unique("sink"), SecurityErrorProbe(bad))
    assert isinstance(lib, KafkaAuthenticationError), lib
    # librdkafka: "SSL handshake failed: ...certificate verify failed: broker certificate could
    # not be verified, verify that ssl.ca.location is correctly configured..."
    assert "certificate verify failed" in str(lib) and "kafka.ssl.ca.location" in str(lib)


def test_ssl_listener_without_client_certificate(secure_kafka):
    sk = secure_kafka
    bad = sk.client_config("writer", "SSL", client_cert=False)
    # TLS 1.3: the handshake "succeeds"; the broker's alert arrives on the first request.
    e = _raises(KafkaAuthenticationError, TransactionClient(bad, timeout=10).describe, ["any-id"])
    assert "rejected the connection" in str(e) and "kafka.ssl.certificate.location" in str(e)

    lib = _failing_init(bad, unique("sink"), SecurityErrorProbe(bad))
    assert isinstance(lib, KafkaAuthenticationError), lib
    assert "alert" in str(lib) and "kafka.ssl.certificate.location" in str(lib)


def test_wrong_key_password(secure_kafka):
    sk = secure_kafka
    bad = {**sk.client_config("writer", "SSL"), "ssl.key.password": WRONG_PASSWORD}
    e = _raises(KafkaConfigError, TransactionClient(bad, timeout=10).describe, ["any-id"])
    assert "client certificate/key" in str(e) and "kafka.ssl.key.password" in str(e)
    with pytest.raises(KafkaException) as info:
        Producer({**bad, "transactional.id": "x", "logger": QUIET})
    lib = translate_kafka_error(info.value, bad, action="creating the producer")
    assert isinstance(lib, KafkaConfigError) and "kafka.ssl.key.password" in str(lib)
    for err in (e, lib):
        _assert_no_secret(str(err) + repr(err), [WRONG_PASSWORD, sk.key_password])


# --------------------------------------------------------------------- authorization


def test_transactional_id_outside_the_granted_prefix(secure_kafka):
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("sec"))
    prefix = unique("sink")
    sk.grant_writer("writer", topic, prefix)
    conf = sk.client_config("writer", "SASL_SSL", "SCRAM-SHA-512")
    tid = f"not-{prefix}-p0"

    p = Producer({**conf, "transactional.id": tid, "logger": QUIET})
    with pytest.raises(KafkaException) as info:
        p.init_transactions(15)
    # librdkafka: "Failed to find transaction coordinator: ...: Broker: Transactional Id
    # authorization failed" (fatal; the id is not named).
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    e = translate_kafka_error(info.value, conf, action="init_transactions", transactional_id=tid)
    assert isinstance(e, KafkaAuthorizationError)
    assert repr(tid) in str(e) and "WRITE and DESCRIBE" in str(e)

    with TransactionClient(conf, timeout=10) as tc:
        d = _raises(KafkaAuthorizationError, tc.describe, [tid])
        c = _raises(KafkaAuthorizationError, tc.end_txn, tid, 1, 0, True)
    for err in (d, c):
        assert repr(tid) in str(err) and "TransactionalId" in str(err)


def test_committer_without_write_on_the_transactional_id_commits_nothing(secure_kafka,
                                                                         reader_groups):
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("sec"))
    prefix = unique("sink")
    sk.grant_writer("writer", topic, prefix)
    sk.grant_reader("reader", topic)
    # A committer identity with DESCRIBE only: it can validate but not end the transaction.
    sk.create_acls([allow("stranger", ResourceType.TRANSACTIONAL_ID, prefix, AclOperation.DESCRIBE,
                          ResourcePatternType.PREFIXED)])
    task = PreCommitted(sk.client_config("writer", "SASL_SSL", "SCRAM-SHA-512"), f"{prefix}-p0",
                        topic, [b"a", b"b"], 1)
    committer = sk.client_config("stranger", "SASL_SSL", "SCRAM-SHA-512")
    with TransactionClient(committer, timeout=10) as tc:
        desc = tc.describe([task.transactional_id])[task.transactional_id]
        assert desc.state == "Ongoing" and desc.producer_id == task.producer_id
        # The broker leaves out the partitions of topics the principal may not DESCRIBE.
        assert desc.partitions == {}
        e = _raises(KafkaAuthorizationError, tc.end_txn, task.transactional_id, task.producer_id,
                    task.producer_epoch, True)
    assert repr(task.transactional_id) in str(e) and "WRITE" in str(e)
    reader = sk.target("reader", "SASL_SSL", "SCRAM-SHA-512")
    assert reader.read_all(topic) == []
    with TransactionClient(sk.client_config("writer", "SASL_SSL", "SCRAM-SHA-512")) as tc:
        assert tc.end_txn(task.transactional_id, task.producer_id, task.producer_epoch,
                          commit=False) == 0
    assert reader.read_all(topic) == []
    assert sk.admin_target.read_all(topic, isolation="read_uncommitted") != []  # really written


def test_idempotent_producer_needs_no_cluster_acl(secure_kafka):
    """deliveryGuarantee=at_least_once: Kafka >= 3.0 (KIP-679) checks topic WRITE, not the
    cluster IDEMPOTENT_WRITE, when an idempotent producer asks for its producer id."""
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("sec"))
    sk.grant_writer("writer", topic, None)  # topic WRITE + DESCRIBE, nothing else
    p = Producer({**sk.client_config("writer", "SASL_SSL", "SCRAM-SHA-512"),
                  "enable.idempotence": True, "logger": QUIET})
    results: list = []
    p.produce(topic, b"idempotent", on_delivery=lambda err, msg: results.append(err))
    assert p.flush(30) == 0
    assert results == [None]
    assert [r.value for r in sk.admin_target.read_all(topic)] == [b"idempotent"]


def test_exactly_once_without_describe_configs_needs_the_acl_or_the_acknowledgement(secure_kafka):
    """Kafka 4.3 refuses a principal without DescribeConfigs on the cluster the brokers' settings
    (CLUSTER_AUTHORIZATION_FAILED), as a managed service may: transaction partition verification
    cannot be read, so the exactly-once sink refuses at start, naming the ACL, the option that
    acknowledges it and at_least_once; either of the first two lets it start. (``stranger``: the
    pipeline tests grant ``writer`` DescribeConfigs on this session's cluster.)"""
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("sec"))
    prefix = unique("sink")
    sk.grant_writer("stranger", topic, f"{prefix}-")

    def start(**options: str) -> None:
        cfg = SinkConfig.from_options({
            **sk.kafka_options("stranger", "SASL_SSL", "SCRAM-SHA-512"), "topic": topic,
            "checkpointLocation": "/unused", "transactionalIdPrefix": prefix, **options},
            streaming=True)
        validate_at_start(cfg, None, timeout_s=30)

    with pytest.raises(UnsupportedBrokerError) as refused:
        start()
    msg = str(refused.value)
    assert refused.value.missing == ("transaction partition verification",), msg
    assert refused.value.cluster == sk.client_config("stranger", "SASL_SSL",
                                                     "SCRAM-SHA-512")["bootstrap.servers"]
    for text in ("transaction partition verification cannot be confirmed: broker(s) 1",
                 "--operation DescribeConfigs --cluster",
                 "option assumeTransactionPartitionVerification=true",
                 "set deliveryGuarantee=at_least_once"):
        assert text in msg, (text, msg)
    start(assumeTransactionPartitionVerification="true")
    start(deliveryGuarantee="at_least_once")
    granted = sk.grant_describe_configs("stranger")
    try:
        start()  # the setting read: true (Kafka 4.3's default)
    finally:
        sk.delete_acls(granted)


def test_writer_without_topic_write_commits_nothing(secure_kafka):
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("sec"))
    prefix = unique("sink")
    sk.grant_writer("writer", topic, prefix, topic_write=False)  # DESCRIBE only on the topic
    conf = sk.client_config("writer", "SASL_SSL", "SCRAM-SHA-512")
    p = Producer({**conf, "transactional.id": f"{prefix}-p0", "logger": QUIET})
    p.init_transactions(30)
    p.begin_transaction()
    failed: list = []
    p.produce(topic, b"x", on_delivery=lambda err, msg: failed.append(err))
    p.flush(30)
    # librdkafka: AddPartitionsToTxn is refused; the record is purged (_PURGE_QUEUE) and the
    # transaction needs an abort: "Failed to add partition(s) to transaction on broker
    # TxnCoordinator/1: Broker: Topic authorization failed".
    with pytest.raises(KafkaException) as info:
        p.commit_transaction(30)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert info.value.args[0].txn_requires_abort()
    e = translate_kafka_error(info.value, conf, action="commit_transaction", topic=topic,
                              role="writer")
    assert isinstance(e, KafkaAuthorizationError)
    assert repr(topic) in str(e) and "WRITE and DESCRIBE" in str(e)
    # Observed with Kafka 4.3.1 + librdkafka 2.16: no partition ever joined the transaction, and
    # the abort is refused with a FATAL INVALID_TXN_STATE: the task must drop this producer.
    try:
        p.abort_transaction(30)
    except KafkaException as abort_error:
        assert abort_error.args[0].fatal() or (
            abort_error.args[0].code() == KafkaError.INVALID_TXN_STATE), abort_error
    assert failed and failed[0] is not None
    assert sk.admin_target.read_all(topic, isolation="read_uncommitted") == []


def test_reader_without_read_or_describe_on_the_topic(secure_kafka, reader_groups):
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("sec"))
    sk.admin_target.produce(topic, [("k", "v")])
    conf = sk.client_config("reader", "SASL_SSL", "SCRAM-SHA-512")
    def consumer() -> Consumer:
        return Consumer({**conf, "group.id": unique("reader"), "enable.partition.eof": True,
                         "logger": QUIET})

    c = consumer()
    try:
        # No ACL at all: metadata says so (an assigned partition would just stay silent).
        md = c.list_topics(topic, timeout=15)
        err = md.topics[topic].error
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert not md.topics[topic].partitions
        e = translate_kafka_error(err, conf, action="listing partitions", topic=topic,
                                  role="reader")
        assert isinstance(e, KafkaAuthorizationError) and repr(topic) in str(e)
    finally:
        c.close()

    # DESCRIBE but no READ: the fetch is refused.
    sk.grant_reader("reader", topic, read=False)
    c = consumer()
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        fetch_error = None
        while fetch_error is None:
            assert time.monotonic() < deadline, "no fetch error within 30 s"
            for m in c.consume(10, 0.5):
                assert m.error() is not None, "a record was read without READ"
                if m.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    fetch_error = m.error()
        # librdkafka: "Fetch from broker 1 failed: Broker: Topic authorization failed".
        assert "Topic authorization failed" in fetch_error.str()
        e = translate_kafka_error(fetch_error, conf, action="reading", topic=topic, role="reader")
        assert isinstance(e, KafkaAuthorizationError)
        assert repr(topic) in str(e) and "READ and DESCRIBE" in str(e)
    finally:
        c.close()


def test_reader_needs_describe_on_its_group_even_when_assigning(secure_kafka):
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("sec"))
    sk.admin_target.produce(topic, [("k", "v")])
    sk.grant_reader("reader", topic)
    conf = sk.client_config("reader", "SASL_SSL", "SCRAM-SHA-512")
    group = unique("nogroup")  # no ACL on this group
    # Without the group ACL, close() waits session.timeout.ms (45 s by default) for the group
    # coordinator it never gets: keep that short here.
    c = Consumer({**conf, "group.id": group, "enable.partition.eof": True, "logger": QUIET,
                  "session.timeout.ms": 6000})
    values, group_error = [], None
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while group_error is None or not values:
            assert time.monotonic() < deadline, f"values={values} group_error={group_error}"
            for m in c.consume(10, 0.5):
                if m.error() is None:
                    values.append(m.value())
                elif m.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    group_error = m.error()
    finally:
        c.close()
    # Records flow (the error is not fatal), but librdkafka reports the group coordinator lookup.
    assert values == [b"v"]
    e = translate_kafka_error(group_error, {**conf, "group.id": group}, action="reading")
    assert isinstance(e, KafkaAuthorizationError) and f"Group:{group}" in str(e)


# -------------------------------------------------------------------- secret hygiene


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name} {record.levelname} {record.getMessage()}")


def test_no_secret_in_logs_errors_or_reprs(secure_kafka, reader_groups, caplog):
    """A secured run with librdkafka debug logs on, the failure paths included: grep everything."""
    sk = secure_kafka
    caplog.set_level(logging.DEBUG)
    rdk = logging.getLogger("txkafka.tests.librdkafka.debug")
    rdk.setLevel(logging.DEBUG)
    collect = _Collect()
    rdk.addHandler(collect)  # also propagates to caplog
    seen: list[str] = []  # every error text, repr and traceback we met

    def keep(obj) -> None:
        seen.append(str(obj))
        seen.append(repr(obj))
        if isinstance(obj, BaseException):
            seen.append("".join(traceback.format_exception(obj)))

    topic = sk.admin_target.create_topic(unique("sec"))
    prefix = unique("sink")
    sk.grant_writer("writer", topic, prefix)
    sk.grant_reader("reader", topic)
    try:
        for protocol, mechanism in [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"),
                                    ("SSL", None)]:
            options = sk.kafka_options("writer", protocol, mechanism)
            conf = kafka_client_config(options)  # the option path users take
            keep(describe_config(conf))
            probe = SecurityErrorProbe(conf)
            task = PreCommitted(conf, f"{prefix}-{_label(protocol, mechanism)}", topic, [b"v"], 1,
                                probe=probe, logger=rdk, debug="security,broker,conf,eos,protocol")
            with TransactionClient(conf) as tc:
                keep(tc)
                keep(tc.security)
                keep(tc.describe([task.transactional_id]))
                assert tc.end_txn(task.transactional_id, task.producer_id, task.producer_epoch,
                                  True) == 0
                conn = BrokerConnection("127.0.0.1", 1, SecurityConfig.from_kafka_config(conf))
                keep(conn)
            keep(probe)
        keep(sk.target("reader", "SSL").read_all(topic))

        # The same through a Java-style JAAS option.
        jaas = {**sk.kafka_options("writer", "SASL_SSL", "SCRAM-SHA-512")}
        pw = jaas.pop("kafka.sasl.password")
        jaas.pop("kafka.sasl.username")
        jaas["kafka.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="writer" password="{pw}";')
        conf = kafka_client_config(jaas)
        keep(describe_config(conf))
        with TransactionClient(conf) as tc:
            keep(tc.list_transactions(prefix=prefix))
        bad_jaas = {**jaas, "kafka.sasl.jaas.config": jaas["kafka.sasl.jaas.config"].replace(
            "ScramLoginModule", "OAuthBearerLoginModule")}
        keep(_raises(KafkaConfigError, kafka_client_config, bad_jaas))

        # Failure paths.
        for protocol, mechanism in [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN")]:
            bad = sk.client_config("writer", protocol, mechanism, password=WRONG_PASSWORD)
            keep(_raises(KafkaAuthenticationError, TransactionClient(bad, timeout=10).describe,
                         ["x"]))
            probe = SecurityErrorProbe(bad)
            keep(_failing_init(bad, f"{prefix}-bad", probe, logger=rdk, debug="security,broker"))
            keep(probe)
        bad_key = {**sk.client_config("writer", "SSL"), "ssl.key.password": WRONG_PASSWORD}
        keep(_raises(KafkaConfigError, TransactionClient(bad_key).describe, ["x"]))
        with pytest.raises(KafkaException) as info:
            Producer({**bad_key, "logger": rdk, "debug": "security,conf"})
        keep(info.value)
        keep(translate_kafka_error(info.value, bad_key, action="creating the producer"))
        wrong_ca = sk.client_config("writer", "SASL_SSL", "SCRAM-SHA-512", ca=sk.pki.other_ca)
        keep(_raises(KafkaAuthenticationError, TransactionClient(wrong_ca).describe, ["x"]))
        good = sk.client_config("writer", "SASL_SSL", "SCRAM-SHA-512")
        keep(_raises(KafkaAuthorizationError, TransactionClient(good).end_txn, "not-ours", 1, 0,
                     True))
    finally:
        rdk.removeHandler(collect)

    everything = "\n".join(seen + collect.lines + [r.getMessage() for r in caplog.records])
    # The collection really happened: librdkafka's debug log and the failures are in it.
    assert len(collect.lines) > 100
    assert "sasl.password = [redacted]" in everything  # librdkafka's own config dump
    assert "ssl.key.password = [redacted]" in everything
    assert "Invalid username or password" in everything
    assert "TransactionalId 'not-ours'" in everything
    _assert_no_secret(everything, [*sk.secret_values(), WRONG_PASSWORD])


# ------------------------------------------------------------------ the executors' own fetch


@pytest.mark.parametrize("protocol, mechanism", TRANSPORTS,
                         ids=[_label(p, m) for p, m in TRANSPORTS])
def test_executor_fetch_speaks_every_transport(secure_kafka, protocol, mechanism, caplog):
    """fetcher=wire (the default) reads a range over TLS and SASL itself, with the reader's
    principal and its topic ACLs only, and hands nothing over to librdkafka."""
    from txkafka.connector.source.range_reader import ConsumerPool, FetchTask, fetch_range
    from txkafka.connector.source.options import parse_source_options

    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("wire"))
    sk.admin_target.produce(topic, [(f"k{i}", f"v{i}", 0) for i in range(300)])
    sk.grant_reader("reader", topic)
    options = parse_source_options({**sk.kafka_options("reader", protocol, mechanism),
                                    "subscribe": topic}, streaming=True)
    assert options.fetcher == "wire"
    caplog.set_level(logging.INFO, logger="txkafka.reader")
    task = FetchTask(topic, 0, 10, 300, tuple(sorted(options.consumer_config().items())), 15_000,
                     True, False, options.fetcher)
    pool = ConsumerPool()
    rows = [r for b in fetch_range(task, pool) for r in b.to_pylist()]
    assert [(r["offset"], r["value"]) for r in rows] == [(i, f"v{i}".encode())
                                                         for i in range(10, 300)]
    assert pool.created == 0
    assert not [r for r in caplog.records if "hands offsets" in r.getMessage()]


def test_executor_fetch_without_read_on_the_topic_fails_as_librdkafka_would(secure_kafka,
                                                                            caplog):
    """TOPIC_AUTHORIZATION_FAILED on txkafka's own Fetch: the range goes to the librdkafka
    reader, whose error names the topic and the ACL, exactly as with fetcher=librdkafka."""
    from txkafka.connector.source.range_reader import ConsumerPool, FetchTask, fetch_range
    from txkafka.connector.source.options import parse_source_options

    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("wire"))
    sk.admin_target.produce(topic, [("k", "v", 0)])
    # (The group ACL the query's start check asks for, so librdkafka's consumer closes at once.)
    sk.grant_reader("reader", topic, "spark-kafka-source-", read=False)
    options = parse_source_options({**sk.kafka_options("reader", "SASL_SSL", "SCRAM-SHA-512"),
                                    "subscribe": topic}, streaming=True)
    caplog.set_level(logging.INFO, logger="txkafka.reader")
    task = FetchTask(topic, 0, 0, 1, tuple(sorted(options.consumer_config().items())), 15_000,
                     True, False, options.fetcher)
    pool = ConsumerPool()
    try:
        with pytest.raises(KafkaAuthorizationError) as info:
            list(fetch_range(task, pool))
    finally:
        pool.close_all()
    assert repr(topic) in str(info.value) and "READ and DESCRIBE" in str(info.value)
    handed = [r.getMessage() for r in caplog.records if "hands offsets" in r.getMessage()]
    assert len(handed) == 1 and "TOPIC_AUTHORIZATION_FAILED" in handed[0]


def test_a_crl_revoking_the_broker_certificate_refuses_the_connection(secure_kafka):
    """kafka.ssl.crl.location holds for txkafka's own connections (the driver's transaction
    client, the executors' fetch) as for librdkafka: checked against the CA's revocation list,
    the broker's certificate is refused once revoked."""
    sk = secure_kafka
    conf = sk.client_config("writer", "SASL_SSL", "SCRAM-SHA-512")
    with TransactionClient({**conf, "ssl.crl.location": str(sk.pki.crl_clean)}, timeout=10) as tc:
        assert tc.brokers()
    revoked = {**conf, "ssl.crl.location": str(sk.pki.crl_broker_revoked)}
    e = _raises(KafkaAuthenticationError, TransactionClient(revoked, timeout=10).describe,
                ["any-id"])
    assert "TLS handshake" in str(e) and "certificate revoked" in str(e)
    bad = {**conf, "ssl.crl.location": str(sk.pki.ca.parent / "no-such-crl.pem")}
    e = _raises(KafkaConfigError, TransactionClient(bad, timeout=10).brokers)
    assert "kafka.ssl.crl.location=" in str(e) and "revocation list" in str(e)
