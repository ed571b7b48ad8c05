"""The sink's options fail at query start, naming the option, when every task would fail later."""

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource

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
     "'kafka.max.in.flight'"),
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

    def __init__(self, answers, brokers=None):
        self.answers = answers
        self.brokers = brokers or (sorted(answers) if isinstance(answers, dict) else [])
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
        brokers = {b: SimpleNamespace(host=f"h{b}", port=9092) for b in self.brokers}
        return SimpleNamespace(brokers=brokers, topics={topic: SimpleNamespace(error=None)})

    def describe_topics(self, topics, include_authorized_operations=False, request_timeout=None):
        return {t: _Future(SimpleNamespace(authorized_operations=None)) for t in topics.topic_names}

    def poll(self, timeout=0):
        return 0


SILENT = object()


class FakeVersions:
    """The driver's protocol client: API versions per broker (``None``: the broker is down)."""

    def __init__(self, add_partitions_max: dict[int, int | None]):
        self.top = add_partitions_max

    def api_versions(self, host, port):
        top = self.top[int(host[1:])]
        if top is None:
            raise KafkaProtocolError(f"cannot connect to broker {host}:{port}")
        return {24: (0, top)}

    def describe(self, ids):
        return {}


def _addresses(ids):
    return {b: (f"h{b}", 9092) for b in ids}


def _check(monkeypatch, answers, add_partitions_max=None, **options):
    from txkafka.connector.sink import committer as kafka_committer, start_checks as sink_validation

    monkeypatch.setattr(kafka_committer, "shared_client",
                        lambda *a, **k: FakeVersions(add_partitions_max or {}))
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


def test_a_broker_that_hides_the_setting_is_judged_by_its_version(monkeypatch, caplog):
    with pytest.raises(UnsupportedBrokerError, match="broker 1: no such setting"):
        _check(monkeypatch, {1: {M: "900000"}}, {1: 3})  # AddPartitionsToTxn v3: Kafka 3.5
    _check(monkeypatch, {1: {M: "900000"}}, {1: 5})  # v5: Kafka 4.x hiding it; warned
    assert "cannot be read, so txkafka cannot check it" in caplog.text


def test_without_describe_configs_the_version_decides(monkeypatch):
    denied = KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED))
    _check(monkeypatch, denied, {1: 4, 2: 5})
    with pytest.raises(UnsupportedBrokerError, match="broker 2: no such setting"):
        _check(monkeypatch, denied, {1: 4, 2: 2})


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
    denied = KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED))
    result = _check(monkeypatch, denied, {1: 4, 2: None})
    assert result.unasked == {2} and result.brokers[1].verifies


# ------------------------------------------------------------ what the query remembers


@pytest.fixture
def fake_cluster(monkeypatch):
    """validate_at_start against fake brokers: ``cluster.answers`` (DescribeConfigs by broker),
    ``cluster.admins`` counts the admin clients made (each start check makes one)."""
    from txkafka.connector.sink import committer as kafka_committer, start_checks as sink_validation

    cluster = SimpleNamespace(answers={1: OK, 2: OK, 3: OK}, admins=0)

    def admin(cfg, probe):
        cluster.admins += 1
        return FakeAdmin(cluster.answers, brokers=sorted(cluster.answers))

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
    driver does too: the record beside the commit log is trusted, no broker is asked again."""
    cfg, log = _query(tmp_path)
    validate_at_start(cfg, None, timeout_s=1.0, commit_log=log)
    assert fake_cluster.admins == 1
    assert log.read_start_checks()["unasked"] == []
    validate_at_start(cfg, None, timeout_s=1.0, commit_log=log)  # the same process: cached
    fake_cluster.answers[2] = SILENT
    _new_process(monkeypatch)
    validate_at_start(cfg, None, timeout_s=1.0, commit_log=log)  # the record: nothing asked
    assert fake_cluster.admins == 1


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
    _new_process(monkeypatch)
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    assert fake_cluster.admins == 2


def test_a_broker_asked_later_that_proves_unsafe_stops_the_query(
        fake_cluster, monkeypatch, tmp_path):
    cfg, log = _query(tmp_path)
    fake_cluster.answers[3] = SILENT
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
    _new_process(monkeypatch)  # a restarted driver reads the record and asks broker 3
    fake_cluster.answers[3] = {V: "false", M: "900000"}
    with pytest.raises(UnsupportedBrokerError, match="broker 3: transaction.partition"):
        validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)


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
