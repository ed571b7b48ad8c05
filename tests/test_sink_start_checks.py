"""The sink's options fail at query start, naming the option, when every task would fail later."""

import time
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource

from tests.test_coordinator_client_failures import brokers  # noqa: F401 - a fixture
from txkafka.connector.client.protocol import Writer
from txkafka.connector.errors import KafkaConfigError, KafkaProtocolError, UnsupportedBrokerError
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.sink.start_checks import check_producer_config, validate_at_start

# Nothing listens here: a check that contacted the broker would hang or fail differently.
BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "out", "checkpointLocation": "/tmp/ck"}


@pytest.mark.parametrize("key", ["kafka.acks", "kafka.request.required.acks"])
@pytest.mark.parametrize("value", ["1", "0"])
def test_acks_other_than_all_is_refused(key, value):
    with pytest.raises(KafkaConfigError, match=f"option '{key}' must be 'all'"):
        SinkConfig.from_options({**BASE, key: value}, streaming=True)


@pytest.mark.parametrize("value", ["all", "-1", "ALL"])
def test_acks_all_is_accepted(value):
    SinkConfig.from_options({**BASE, "kafka.acks": value}, streaming=True)


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
@pytest.mark.parametrize("extra, named", [
    ({"kafka.max.in.flight.requests.per.connection": "10"},
     "'kafka.max.in.flight.requests.per.connection'"),
    ({"kafka.retries": "0"}, "'kafka.retries'"),
    ({"kafka.batch.size": "-5"}, "'kafka.batch.size'"),
])
def test_producer_settings_librdkafka_refuses_fail_at_start(guarantee, extra, named):
    cfg = SinkConfig.from_options({**BASE, "deliveryGuarantee": guarantee, **extra}, streaming=True)
    with pytest.raises(KafkaConfigError, match=named):
        check_producer_config(cfg)
    # validate_at_start runs the same check before it contacts the cluster
    with pytest.raises(KafkaConfigError, match=named):
        validate_at_start(cfg, schema=None, timeout_s=0.5)


def test_valid_producer_settings_pass_without_a_broker():
    check_producer_config(SinkConfig.from_options(
        {**BASE, "kafka.linger.ms": "20", "kafka.compression.type": "lz4"}, streaming=True))



@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
@pytest.mark.parametrize("key", ["kafka.session.timeout.ms", "kafka.fetch.min.bytes",
                                 "kafka.max.partition.fetch.bytes"])  # an alias: named as given
def test_consumer_only_settings_are_not_silently_ignored_by_the_sink(guarantee, key):
    # librdkafka's producer ignores consumer properties with only a CONFWARN log line.
    cfg = SinkConfig.from_options({**BASE, "deliveryGuarantee": guarantee, key: "100"},
                                  streaming=True)
    with pytest.raises(KafkaConfigError, match=f"option '{key}' is a librdkafka consumer setting"):
        check_producer_config(cfg)


def test_the_start_check_does_not_create_a_missing_topic():
    # The metadata request for the sink's topic must not ask the broker to create it: on a broker
    # with auto.create.topics.enable=true (Kafka's default) the check would create the topic with
    # the broker's defaults and pass, instead of failing as documented.
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from txkafka.connector.sink.start_checks import _check_cluster

    mock = Producer({"test.mock.num.brokers": 1, "logger": _silent()})
    brokers = mock.list_topics(timeout=10).brokers
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers.values())
    cfg = SinkConfig.from_options({**BASE, "kafka.bootstrap.servers": bootstrap,
                                   "topic": "never-created", "deliveryGuarantee": "at_least_once"},
                                  streaming=True)
    with pytest.raises(KafkaConfigError, match="'never-created' .*does not exist"):
        _check_cluster(cfg, timeout_s=10)
    admin = AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False,
                         "logger": _silent()})
    assert "never-created" not in admin.list_topics(timeout=10).topics


def _silent():
    import logging

    quiet = logging.Logger("mock-cluster")
    quiet.addHandler(logging.NullHandler())
    return quiet


_OAUTH = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER"}


@pytest.mark.parametrize("extra, named", [
    ({}, "without a token source .* set kafka.sasl.oauthbearer.method=oidc"),
    ({"kafka.sasl.oauthbearer.method": "oidc", "kafka.sasl.oauthbearer.client.id": "w",
      "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
      "kafka.sasl.oauthbearer.grant.type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
      "kafka.sasl.oauthbearer.assertion.private.key.file": "/k.pem"},
     "assertion.private.key.file: .*client credentials grant only"),
])
def test_oauthbearer_forms_the_commit_client_lacks_fail_at_start_before_any_connection(extra, named):
    """The exactly-once sink refuses them in validate_at_start before contacting the cluster (the
    bootstrap address answers nothing); the at_least_once sink leaves OAUTHBEARER to librdkafka."""
    cfg = SinkConfig.from_options({**BASE, **_OAUTH, **extra}, streaming=True)
    with pytest.raises(KafkaConfigError, match=named):
        validate_at_start(cfg, schema=None, timeout_s=0.5)


@pytest.mark.parametrize("opts, expected", [({}, 20), ({"kafka.reconnect.backoff.ms": "250"}, "250")])
def test_the_start_check_s_admin_client_connects_quickly_unless_the_user_says_otherwise(
        monkeypatch, opts, expected):
    """librdkafka pauses half of reconnect.backoff.ms before its first connection to an advertised
    broker (client.config.RECONNECT_BACKOFF_MS); the start check's first request waits for it."""
    import confluent_kafka.admin

    from txkafka.connector.sink import start_checks as sink_validation

    seen: list[dict] = []

    class Stop(Exception):
        pass

    def fake_admin(conf):
        seen.append(dict(conf))
        raise Stop

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", fake_admin)
    cfg = SinkConfig.from_options({**BASE, **opts}, streaming=True)
    with pytest.raises(Stop):
        sink_validation._check_cluster(cfg, timeout_s=1.0)
    assert seen[0]["reconnect.backoff.ms"] == expected
    assert seen[0]["allow.auto.create.topics"] is False


# ----------------------------------------------------------------------------- hanging transactions
# (against a real broker with the setting off: integration_tests/test_late_transactions.py)

class _Entry:
    def __init__(self, value):
        self.value = value


class _Future:
    def __init__(self, entries):
        self.entries = entries

    def result(self, timeout=None):
        if isinstance(self.entries, Exception):
            raise self.entries
        return self.entries


class FakeAdmin:
    """DescribeConfigs answers per broker id: {name: value}, an exception (for that broker, or for
    all), or ``SILENT`` (a broker that never answers: its future times out)."""

    def __init__(self, answers, brokers=None, addresses=None):
        self.answers = answers
        self.brokers = brokers or (sorted(answers) if isinstance(answers, dict) else [])
        self.addresses = addresses or {b: (f"h{b}", 9092) for b in self.brokers}
        self.calls = 0

    def describe_configs(self, resources, request_timeout=None):
        if sum(r.restype_int == ConfigResource.Type.BROKER.value for r in resources) > 1:
            # librdkafka's rule (seen on a 3-node cluster): one BROKER resource per call.
            raise KafkaException(KafkaError(KafkaError._CONFLICT,
                                            "Only one ConfigResource of type BROKER is allowed "
                                            "per call"))
        self.calls += 1
        if isinstance(self.answers, Exception):
            return {r: _Future(self.answers) for r in resources}
        out = {}
        for r in resources:
            a = self.answers[int(r.name)]
            out[r] = (_Future(TimeoutError()) if a is SILENT else _Future(a)
                      if isinstance(a, Exception) else _Future({k: _Entry(v) for k, v in a.items()}))
        return out

    # What validate_at_start's own checks ask besides DescribeConfigs.
    def list_topics(self, topic=None, timeout=None):
        brokers = {b: SimpleNamespace(host=self.addresses[b][0], port=self.addresses[b][1])
                   for b in self.brokers}
        return SimpleNamespace(brokers=brokers, topics={topic: SimpleNamespace(error=None)})

    def describe_topics(self, topics, include_authorized_operations=False, request_timeout=None):
        return {t: _Future(SimpleNamespace(authorized_operations=None)) for t in topics.topic_names}

    def poll(self, timeout=0):
        return 0


SILENT = object()


# What Apache Kafka 4.3.1 announces of the requests the exactly-once sink sends.
KAFKA_4 = {0: (0, 13), 3: (0, 13), 10: (0, 6), 22: (0, 5), 24: (0, 5), 26: (0, 5), 65: (0, 0),
           66: (0, 2), 18: (0, 4)}


class FakeVersions:
    """The driver's protocol client: API versions per broker, Kafka 4.3's unless told otherwise
    (``add_partitions_max``: AddPartitionsToTxn's top version, ``None``: the broker is down;
    ``without``: API keys a broker does not offer)."""

    def __init__(self, add_partitions_max: dict[int, int | None] | None = None,
                 without: dict[int, set[int]] | None = None,
                 offer: dict[int, tuple[int, int]] | None = None):
        self.top = add_partitions_max or {}
        self.without = without or {}
        self.offer = offer or {}  # versions every broker offers instead of Kafka 4.3's

    def api_versions(self, host, port):
        node = int(host[1:])
        top = self.top.get(node, KAFKA_4[24][1])
        if top is None:
            raise KafkaProtocolError(f"cannot connect to broker {host}:{port}")
        return {k: v for k, v in {**KAFKA_4, 24: (0, top), **self.offer}.items()
                if k not in self.without.get(node, ())}

    def describe(self, ids, fresh=False):
        return {}


def _addresses(ids):
    return {b: (f"h{b}", 9092) for b in ids}


def _check(monkeypatch, answers, add_partitions_max=None, without=None, offer=None, **options):
    from txkafka.connector.sink import committer as kafka_committer, start_checks as sink_validation

    monkeypatch.setattr(kafka_committer, "shared_client",
                        lambda *a, **k: FakeVersions(add_partitions_max, without, offer))
    cfg = SinkConfig.from_options({"kafka.bootstrap.servers": "h:9092", "topic": "out",
                                   "checkpointLocation": "/tmp/x", **options}, streaming=True)
    ids = sorted(answers) if isinstance(answers, dict) else sorted(add_partitions_max)
    return sink_validation.check_broker_settings(cfg, FakeAdmin(answers), _addresses(ids), 5.0)


V = "transaction.partition.verification.enable"
M = "transaction.max.timeout.ms"


def test_every_broker_must_verify_transaction_partitions(monkeypatch):
    _check(monkeypatch, {1: {V: "true", M: "900000"}, 2: {V: "true", M: "900000"}})
    with pytest.raises(UnsupportedBrokerError) as e:
        _check(monkeypatch, {1: {V: "true", M: "900000"}, 2: {V: "false", M: "900000"},
                             3: {M: "900000"}}, {3: 3})
    text = str(e.value)
    assert "broker 2: transaction.partition.verification.enable=false" in text
    assert "broker 3: no such setting (Kafka older than 3.6)" in text and "broker 1" not in text
    assert "hanging transaction" in text and "deliveryGuarantee=at_least_once" in text


ASSUME = {"assumeTransactionPartitionVerification": "true"}
DENIED = KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED))


def _assert_refusal(e: UnsupportedBrokerError, missing: tuple[str, ...], *texts: str) -> None:
    """What every refusal says: the cluster, what it lacks, and the at_least_once way on."""
    msg = str(e)
    assert e.missing == missing and e.cluster == "h:9092", (e.missing, e.cluster)
    assert "cannot run on the cluster at kafka.bootstrap.servers=h:9092" in msg, msg
    assert f"which lacks {', '.join(missing)}" in msg, msg
    assert "set deliveryGuarantee=at_least_once" in msg and "docs/managed-kafka.md" in msg, msg
    for text in texts:
        assert text in msg, (text, msg)


@pytest.mark.parametrize("answers", [{1: {M: "900000"}, 2: {M: "900000"}},  # left out
                                     DENIED],  # no DESCRIBE_CONFIGS on the cluster
                         ids=["setting-left-out", "describe-configs-denied"])
def test_a_setting_that_cannot_be_read_refuses_unless_the_user_acknowledges_it(
        monkeypatch, caplog, answers):
    """Kafka 3.6+ by its versions, but the setting is unknown: a broker with it off could leave a
    hanging transaction, so neither "unsafe" nor silently "safe": refused, naming the permission
    to grant and the option that acknowledges it (a managed service that hides broker settings)."""
    with pytest.raises(UnsupportedBrokerError) as e:
        _check(monkeypatch, answers, {1: 4, 2: 5})
    _assert_refusal(e.value, ("transaction partition verification",),
                    "transaction partition verification cannot be confirmed: broker(s) 1, 2",
                    "--operation DescribeConfigs --cluster",
                    "option assumeTransactionPartitionVerification=true")
    caplog.clear()
    result = _check(monkeypatch, answers, {1: 4, 2: 5}, **ASSUME)
    assert sorted(result.brokers) == [1, 2] and result.brokers[1].verifies
    assert "cannot be read, so txkafka cannot check it" in caplog.text
    assert "assumeTransactionPartitionVerification=true says every broker" in caplog.text


@pytest.mark.parametrize("answers", [{1: {M: "900000"}, 2: {M: "900000"}}, DENIED],
                         ids=["setting-left-out", "describe-configs-denied"])
def test_a_broker_older_than_3_6_is_refused_even_when_acknowledged(monkeypatch, answers):
    """AddPartitionsToTxn below v4: the broker has no verification to assume."""
    with pytest.raises(UnsupportedBrokerError) as e:
        _check(monkeypatch, answers, {1: 4, 2: 3}, **ASSUME)
    _assert_refusal(e.value, ("transaction partition verification",),
                    "broker 2: no such setting (Kafka older than 3.6)")
    assert "broker 1" not in str(e.value)


def test_the_acknowledgement_is_a_boolean_option():
    for value, expected in (("true", True), ("FALSE", False), (None, False)):
        opts = {**BASE, **({} if value is None else
                           {"assumeTransactionPartitionVerification": value})}
        assert SinkConfig.from_options(opts, streaming=True).assume_partition_verification \
            is expected
    with pytest.raises(KafkaConfigError, match="'assumeTransactionPartitionVerification' must be "
                                               "true or false, got 'yes'"):
        SinkConfig.from_options({**BASE, "assumeTransactionPartitionVerification": "yes"},
                                streaming=True)


# ------------------------------------------------------------ what the brokers offer

@pytest.mark.parametrize("producer", ["txkafka", "librdkafka"])
def test_brokers_without_describe_or_list_transactions_are_refused(monkeypatch, producer):
    """The driver validates with DescribeTransactions (API 65) and sweeps with ListTransactions
    (API 66); a service without them would fail every batch after its tasks wrote."""
    with pytest.raises(UnsupportedBrokerError) as e:
        _check(monkeypatch, {1: OK, 2: OK}, without={2: {65, 66}}, producer=producer)
    _assert_refusal(e.value, ("DescribeTransactions", "ListTransactions"),
                    "DescribeTransactions (API 65) v0 is not offered by broker(s) 2 (the driver "
                    "validates", "ListTransactions (API 66) v0 is not offered by broker(s) 2 (")


@pytest.mark.parametrize("producer, named", [
    ("txkafka", "InitProducerId (API 22) v2-4 is not offered by broker(s) 1, 2"),
    ("librdkafka", "InitProducerId (API 22) v0+ is not offered by broker(s) 1, 2"),
])
def test_brokers_without_transactions_are_refused(monkeypatch, producer, named):
    """A service (or tier) without Kafka transactions: refused at start, before any task."""
    with pytest.raises(UnsupportedBrokerError) as e:
        _check(monkeypatch, {1: OK, 2: OK}, without={1: {22, 24, 26}, 2: {22, 24, 26}},
               producer=producer)
    _assert_refusal(e.value, ("transactions",), "transactions are not available: EndTxn (API 26)",
                    named, "AddPartitionsToTxn (API 24)", "without Kafka transactions)")


def test_request_versions_are_those_of_the_producer_the_tasks_use(monkeypatch):
    """txkafka's producer sends Produce v9-11; librdkafka's picks its own (v3 and later)."""
    produce_v8 = {0: (3, 8)}
    with pytest.raises(UnsupportedBrokerError) as e:
        _check(monkeypatch, {1: OK, 2: OK}, offer=produce_v8, producer="txkafka")
    _assert_refusal(e.value, ("request versions",),
                    "Produce (API 0) v9-11 is not offered by broker(s) 1, 2")
    _check(monkeypatch, {1: OK, 2: OK}, offer=produce_v8, producer="librdkafka")


def test_every_problem_of_the_cluster_is_named_in_one_refusal(monkeypatch):
    with pytest.raises(UnsupportedBrokerError) as e:
        _check(monkeypatch, {1: {V: "false", M: "900000"}, 2: OK}, without={2: {65}})
    _assert_refusal(e.value, ("DescribeTransactions", "transaction partition verification"),
                    "broker 1: transaction.partition.verification.enable=false",
                    "DescribeTransactions (API 65) v0 is not offered by broker(s) 2")


def test_the_refusal_survives_pickling():
    import pickle

    e = UnsupportedBrokerError("m", cluster="b:9092", missing=("transactions",))
    back = pickle.loads(pickle.dumps(e))
    assert (str(back), back.cluster, back.missing) == ("m", "b:9092", ("transactions",))


def test_the_timeout_cap_is_the_lowest_broker_s(monkeypatch):
    with pytest.raises(KafkaConfigError, match="transaction.max.timeout.ms=30000"):
        _check(monkeypatch, {1: {V: "true", M: "900000"}, 2: {V: "true", M: "30000"}})


# ------------------------------------------------------------------- brokers that do not answer

OK = {V: "true", M: "900000"}


@pytest.mark.parametrize("silence", [
    SILENT,  # the future never completes (a SIGSTOPped broker): TimeoutError
    KafkaException(KafkaError(KafkaError._TIMED_OUT)),   # librdkafka's request time-out
    KafkaException(KafkaError(KafkaError._TRANSPORT)),   # the connection broke (SIGKILL)
])
def test_a_broker_that_does_not_answer_never_fails_the_checks(monkeypatch, caplog, silence):
    """A broker down (or restarting) made its DescribeConfigs time out, and the TimeoutError failed
    the query ("Failed to initialize Python data source writer ... TimeoutError") although the
    cluster was fine: the brokers that answer are checked, the others named in the log."""
    result = _check(monkeypatch, {1: OK, 2: silence, 3: OK})
    assert result.unasked == {2} and sorted(result.brokers) == [1, 3]
    assert "broker(s) [2] did not answer the sink's start checks" in caplog.text


def test_a_broker_that_answers_unsafe_is_refused_while_another_is_down(monkeypatch):
    with pytest.raises(UnsupportedBrokerError, match="broker 3: transaction.partition"):
        _check(monkeypatch, {1: OK, 2: SILENT, 3: {V: "false", M: "900000"}})


def test_without_describe_configs_a_broker_down_is_asked_later(monkeypatch):
    result = _check(monkeypatch, DENIED, {1: 4, 2: None}, **ASSUME)
    assert result.unasked == {2} and result.brokers[1].verifies


def test_a_broker_that_stops_answering_after_describe_configs_is_asked_later(monkeypatch):
    result = _check(monkeypatch, {1: OK, 2: OK}, {2: None})
    assert result.unasked == {2} and sorted(result.brokers) == [1]
    with pytest.raises(UnsupportedBrokerError, match="broker 2: transaction.partition"):
        _check(monkeypatch, {1: OK, 2: {V: "false", M: "900000"}}, {2: None})  # told enough


# ------------------------------------------------------------ what the query remembers


@pytest.fixture
def fake_cluster(monkeypatch):
    """validate_at_start against fake brokers: ``cluster.answers`` (DescribeConfigs by broker; the
    metadata lists every broker there), ``cluster.admins`` counts the admin clients made (each
    look at the cluster makes one), ``cluster.described`` the brokers asked, in order."""
    from txkafka.connector.sink import committer as kafka_committer, start_checks as sink_validation

    cluster = SimpleNamespace(answers={1: OK, 2: OK, 3: OK}, admins=0, described=[])

    def admin(cfg, probe):
        cluster.admins += 1
        fake = FakeAdmin(cluster.answers, brokers=sorted(cluster.answers))
        describe = fake.describe_configs

        def counted(resources, request_timeout=None):
            cluster.described.extend(int(r.name) for r in resources)
            return describe(resources, request_timeout)

        fake.describe_configs = counted
        return fake

    monkeypatch.setattr(sink_validation, "_admin", admin)
    monkeypatch.setattr(kafka_committer, "shared_client", lambda *a, **k: FakeVersions({}))
    monkeypatch.setattr(sink_validation, "_PASSED", {})
    return cluster


def _query(tmp_path, **options):
    from txkafka.connector.sink.commit_log import SinkCommitLog

    cfg = SinkConfig.from_options({"kafka.bootstrap.servers": "h:9092", "topic": "out",
                                   "checkpointLocation": str(tmp_path), **options},
                                  streaming=True)
    return cfg, SinkCommitLog(str(tmp_path))


def _new_process(monkeypatch):
    from txkafka.connector.sink import start_checks as sink_validation

    monkeypatch.setattr(sink_validation, "_PASSED", {})


def test_a_query_that_passed_its_checks_is_not_failed_by_a_broker_down_later(
        fake_cluster, monkeypatch, tmp_path):
    """Spark creates the writer again at every batch, maybe in a new process, and a restarted
    driver does too: the record beside the commit log is trusted, no broker is asked again (the
    cluster's metadata is looked at, for brokers that joined since)."""
    cfg, log = _query(tmp_path)
    validate_at_start(cfg, None, timeout_s=1.0, commit_log=log)
    assert fake_cluster.admins == 1 and fake_cluster.described == [1, 2, 3]
    assert log.read_start_checks()["unasked"] == []
    validate_at_start(cfg, None, timeout_s=1.0, commit_log=log)  # the same process: cached
    assert fake_cluster.admins == 1
    fake_cluster.answers[2] = SILENT
    _new_process(monkeypatch)
    validate_at_start(cfg, None, timeout_s=1.0, commit_log=log)  # the record: nothing asked
    assert fake_cluster.described == [1, 2, 3]


def test_a_broker_that_could_not_be_asked_is_asked_when_it_answers(
        fake_cluster, monkeypatch, tmp_path):
    from txkafka.connector.sink import start_checks as sink_validation

    cfg, log = _query(tmp_path)
    fake_cluster.answers[2] = SILENT
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    assert log.read_start_checks()["unasked"] == [2]
    # A later call within ASK_AGAIN_S asks nothing; once it is due, broker 2 is asked again.
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    assert fake_cluster.admins == 1
    fake_cluster.answers[2] = OK
    for passed in sink_validation._PASSED.values():
        passed.ask_at = 0.0
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    assert fake_cluster.admins == 2 and log.read_start_checks()["unasked"] == []
    assert sorted(log.read_start_checks()["brokers"]) == ["1", "2", "3"]
    # A new process of the query: nothing left to ask.
    asked = list(fake_cluster.described)
    _new_process(monkeypatch)
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    assert fake_cluster.described == asked


def test_a_broker_asked_later_that_proves_unsafe_stops_the_query(
        fake_cluster, monkeypatch, tmp_path):
    cfg, log = _query(tmp_path)
    fake_cluster.answers[3] = SILENT
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    _new_process(monkeypatch)  # a restarted driver reads the record and asks broker 3
    fake_cluster.answers[3] = {V: "false", M: "900000"}
    with pytest.raises(UnsupportedBrokerError, match="broker 3: transaction.partition"):
        validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)


def test_a_broker_that_joins_later_is_asked_when_the_query_restarts(
        fake_cluster, monkeypatch, tmp_path):
    """A broker id the record does not know (the cluster grown, a broker replaced under a new
    id) is asked, though every broker of the record answered: a restarted driver does not trust
    the record for it."""
    cfg, log = _query(tmp_path)
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)  # brokers 1-3, all fine
    fake_cluster.answers[4] = {V: "false", M: "900000"}
    _new_process(monkeypatch)
    with pytest.raises(UnsupportedBrokerError, match="broker 4: transaction.partition"):
        validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    assert fake_cluster.described == [1, 2, 3, 4]


def test_a_broker_that_joins_while_the_query_runs_is_asked_within_the_interval(
        fake_cluster, monkeypatch, tmp_path, virtual_clock):
    from txkafka.connector.sink.start_checks import ASK_AGAIN_S

    cfg, log = _query(tmp_path)
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    fake_cluster.answers[4] = OK
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)  # within the interval: cached
    assert fake_cluster.admins == 1
    time.sleep(ASK_AGAIN_S)
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)  # asks broker 4 only
    assert fake_cluster.described == [1, 2, 3, 4]
    assert sorted(log.read_start_checks()["brokers"]) == ["1", "2", "3", "4"]
    fake_cluster.answers[5] = {V: "true", M: "30000"}  # a lower cap than the query's timeout
    time.sleep(ASK_AGAIN_S)
    with pytest.raises(KafkaConfigError, match="transaction.max.timeout.ms=30000"):
        validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    assert fake_cluster.described == [1, 2, 3, 4, 5]


def test_the_record_is_judged_against_todays_options(fake_cluster, monkeypatch, tmp_path):
    """A transaction timeout raised above a cap the brokers told before is checked afresh."""
    cfg, log = _query(tmp_path)
    fake_cluster.answers = {1: {V: "true", M: "60000"}, 2: {V: "true", M: "60000"}}
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    _new_process(monkeypatch)
    higher, _ = _query(tmp_path, **{"kafka.transaction.timeout.ms": "90000"})
    with pytest.raises(KafkaConfigError, match="transaction.max.timeout.ms=60000"):
        validate_at_start(higher, None, timeout_s=0.5, commit_log=log)
    assert fake_cluster.admins == 2  # asked afresh, not refused on the record alone
    other, log2 = _query(tmp_path, topic="another")  # another sink's record is not trusted
    _new_process(monkeypatch)
    validate_at_start(other, None, timeout_s=0.5, commit_log=log2)
    assert fake_cluster.admins == 3


def _edit_record(log, **fields) -> None:
    import json

    path = f"{log.root}/start-checks.json"
    with open(path) as f:
        rec = json.load(f)
    rec.update(fields)
    with open(path, "w") as f:
        json.dump(rec, f)


@pytest.mark.parametrize("version", [1, 3, "2"], ids=["older", "newer", "damaged"])
def test_a_record_in_another_format_is_checked_again_never_refused(
        fake_cluster, monkeypatch, tmp_path, version):
    """start-checks.json is a cache of what the cluster answers: a record an older txkafka wrote
    lacks what this one checks, a newer one's may mean something else. Either way the cluster is
    asked again and the record rewritten; no NewerFormatError stops the query."""
    from txkafka.connector import formats

    cfg, log = _query(tmp_path)
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    rec = log.read_start_checks()
    assert rec["version"] == formats.START_CHECKS.current and fake_cluster.admins == 1
    assert rec["txkafka_version"] == formats.txkafka_version()
    _edit_record(log, version=version, txkafka_version="99.0.0")
    _new_process(monkeypatch)
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    assert fake_cluster.admins == 2
    assert log.read_start_checks()["version"] == formats.START_CHECKS.current


def test_an_older_record_without_the_api_versions_is_checked_again(
        fake_cluster, monkeypatch, tmp_path):
    """The development builds' format 1 had no API versions: nothing in it says the brokers
    offer DescribeTransactions, so it is not trusted."""
    cfg, log = _query(tmp_path)
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    _edit_record(log, version=1, brokers={str(b): {"max_timeout_ms": 900000, "verification":
                                                    "true", "verifies": None} for b in (1, 2, 3)})
    _new_process(monkeypatch)
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    assert fake_cluster.admins == 2
    assert "apis" in log.read_start_checks()["brokers"]["1"]


def test_an_acknowledged_record_counts_only_while_the_option_is_set(
        fake_cluster, monkeypatch, tmp_path):
    fake_cluster.answers = {1: DENIED, 2: DENIED, 3: DENIED}
    acknowledged, log = _query(tmp_path, **ASSUME)
    validate_at_start(acknowledged, None, timeout_s=0.5, commit_log=log)
    _new_process(monkeypatch)
    validate_at_start(acknowledged, None, timeout_s=0.5, commit_log=log)  # the record: trusted
    assert fake_cluster.described == [1, 2, 3]
    plain, _ = _query(tmp_path)
    _new_process(monkeypatch)
    with pytest.raises(UnsupportedBrokerError, match="cannot be confirmed"):
        validate_at_start(plain, None, timeout_s=0.5, commit_log=log)
    assert fake_cluster.described == [1, 2, 3] * 2  # asked afresh before refusing


# --------------------------------------------- the driver's protocol client against fake brokers

# Apache Kafka 4.3.1's ApiVersions, of the requests the sink and the fake broker use.
FULL = [(18, 0, 4), (17, 0, 1), (36, 0, 2), (3, 0, 13), (0, 0, 13), (10, 0, 6), (22, 0, 5),
        (24, 0, 5), (26, 0, 5), (65, 0, 0), (66, 0, 2)]


def _on_fake_broker(monkeypatch, broker, answers=None, **options):
    """validate_at_start with txkafka's own client talking to ``broker`` (one node, id 1) and
    DescribeConfigs answered by ``answers``."""
    from txkafka.connector.sink import start_checks as sink_validation

    monkeypatch.setattr(sink_validation, "_PASSED", {})
    monkeypatch.setattr(sink_validation, "_admin", lambda cfg, probe: FakeAdmin(
        answers or {1: OK}, brokers=[1], addresses={1: ("127.0.0.1", broker.port)}))
    cfg = SinkConfig.from_options({"kafka.bootstrap.servers": f"127.0.0.1:{broker.port}",
                                   "topic": "out", "checkpointLocation": "/tmp/x",
                                   "commitTimeoutMs": "5000", **options}, streaming=True)
    validate_at_start(cfg, None, timeout_s=5.0)


def test_a_broker_announcing_neither_describe_nor_list_transactions_is_refused(
        monkeypatch, brokers):
    broker = brokers(offered=[t for t in FULL if t[0] not in (65, 66)])
    with pytest.raises(UnsupportedBrokerError) as e:
        _on_fake_broker(monkeypatch, broker)
    assert e.value.missing == ("DescribeTransactions", "ListTransactions")
    assert f"kafka.bootstrap.servers=127.0.0.1:{broker.port}" in str(e.value)
    assert "DescribeTransactions (API 65) v0 is not offered by broker(s) 1" in str(e.value)
    assert "deliveryGuarantee=at_least_once" in str(e.value)


def test_a_broker_announcing_no_transaction_requests_is_refused(monkeypatch, brokers):
    broker = brokers(offered=[t for t in FULL if t[0] not in (22, 24, 26)])
    with pytest.raises(UnsupportedBrokerError) as e:
        _on_fake_broker(monkeypatch, broker)
    assert e.value.missing == ("transactions",)
    assert "transactions are not available: EndTxn (API 26) v0-4 is not offered by broker(s) 1; " \
        "InitProducerId (API 22) v2-4" in str(e.value)  # producer=auto: txkafka's own


def test_a_broker_refusing_transaction_coordinators_is_refused(monkeypatch, brokers):
    """ApiVersions promises the requests, but FindCoordinator for a transactional id answers an
    error that is neither "retry" nor "not authorized": no transactions for anyone."""
    from tests.test_coordinator_client_failures import FIND_COORDINATOR

    broker = brokers(offered=FULL)

    def refuse(n, body):
        body.int8()
        keys = body.array(lambda r: r.string())
        return Writer(True).int32(0).array(keys, lambda w, k: w.string(k).int32(-1).string("")
                                           .int32(-1).int16(42).string("no transactions")
                                           .tags()).tags().build()

    broker.handlers[FIND_COORDINATOR] = refuse
    with pytest.raises(UnsupportedBrokerError) as e:
        _on_fake_broker(monkeypatch, broker)
    assert e.value.missing == ("transactions",)
    assert ("transactions are not available: FindCoordinator for transactional id "
            "'txkafka-txkafka-acl-check' answered INVALID_REQUEST") in str(e.value)


def test_a_broker_that_offers_everything_passes(monkeypatch, brokers):
    broker = brokers(offered=FULL)
    _on_fake_broker(monkeypatch, broker)  # DescribeTransactions answers; nothing refused


def test_describe_configs_denied_on_a_fake_broker_needs_the_acknowledgement(monkeypatch, brokers):
    broker = brokers(offered=FULL)
    with pytest.raises(UnsupportedBrokerError, match="cannot be confirmed: broker.s. 1 run"):
        _on_fake_broker(monkeypatch, broker, {1: DENIED})
    _on_fake_broker(monkeypatch, broker, {1: DENIED}, **ASSUME)
