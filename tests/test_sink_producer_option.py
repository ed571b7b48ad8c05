"""The sink's ``producer`` option: which kafka.* settings txkafka's own producer applies, which it
refuses (naming them, and librdkafka's producer that applies them), and what ``auto`` picks.
No broker: the producer's requests go to a fake link."""

from __future__ import annotations

import logging
import math

import pytest

from txkafka.connector.sink import task_writer_txkafka as wire_writer
from txkafka.connector.errors import KafkaConfigError, TransactionError
from txkafka.connector.client.error_codes import COORDINATOR_LOAD_IN_PROGRESS
from txkafka.connector.client.protocol import Reader, Writer
from txkafka.connector.sink.task_writer import validate_input_schema
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.client.config import delivery_timeout_ms
from txkafka.connector.sink.start_checks import validate_at_start
from txkafka.connector.client.producer import WireProducer

# Nothing listens here: a check that contacted the broker would hang or fail differently.
BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "out", "checkpointLocation": "/tmp/ck"}
UNSECURED_JWT = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER",
                 "kafka.enable.sasl.oauthbearer.unsecure.jwt": "true",
                 "kafka.sasl.oauthbearer.config": "principal=writer"}
OIDC = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.oauthbearer.method": "oidc", "kafka.sasl.oauthbearer.client.id": "w",
        "kafka.sasl.oauthbearer.client.secret": "s",
        "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "kafka.https.ca.location": "/etc/ca.pem"}


def _cfg(producer: str | None, **options: str) -> SinkConfig:
    opts = {**BASE, **options}
    if producer is not None:
        opts["producer"] = producer
    return SinkConfig.from_options(opts, streaming=True)


# ------------------------------------------------------------------ what producer=txkafka takes

@pytest.mark.parametrize("extra", [
    UNSECURED_JWT, OIDC,
    {"kafka.allow.auto.create.topics": "false"},
    {"kafka.partitioner": "murmur2_random"},
    {"kafka.compression.type": "lz4", "kafka.compression.level": "2"},
    {"kafka.compression.type": "gzip", "kafka.compression.level": "9"},
    {"kafka.compression.codec": "zstd", "kafka.compression.level": "12"},
    {"kafka.message.timeout.ms": "0"},
], ids=["unsecured-jwt", "oidc-with-https-ca", "no-auto-create", "murmur2_random", "lz4-fast",
        "gzip-9", "zstd-12", "no-delivery-limit"])
def test_txkafka_takes_the_settings_it_applies(extra):
    assert _cfg("txkafka", **extra).producer == "txkafka"


@pytest.mark.parametrize("extra, named", [
    ({"kafka.linger.ms": "20"}, r"kafka\.linger\.ms is set"),
    ({"kafka.allow.auto.create.topics": "true"},
     r"kafka\.allow\.auto\.create\.topics='true' .*never creates topics"),
    ({"kafka.partitioner": "consistent_random"},
     r"kafka\.partitioner='consistent_random' .*murmur2_random"),
    ({"kafka.compression.type": "lz4", "kafka.compression.level": "9"},
     r"kafka\.compression\.level=9 is set with lz4"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI"},
     r"kafka\.sasl\.mechanism='GSSAPI'"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384"},
     r"kafka\.ssl\.cipher\.suites is set"),
])
def test_txkafka_refuses_what_it_would_ignore_and_names_the_producer_that_applies_it(extra,
                                                                                    named):
    with pytest.raises(KafkaConfigError, match=named) as info:
        _cfg("txkafka", **extra)
    assert "set producer to 'librdkafka'" in str(info.value)
    assert _cfg("librdkafka", **extra).producer == "librdkafka"  # which applies it


# ------------------------------------------------------------------------------------- auto

@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_the_default_is_auto(guarantee):
    assert _cfg(None, deliveryGuarantee=guarantee).producer == "txkafka"
    assert _cfg(None, deliveryGuarantee=guarantee,
                **{"kafka.queue.buffering.max.messages": "1000"}).producer == "librdkafka"


def test_auto_writes_with_txkafka_unless_a_setting_needs_librdkafka(caplog, monkeypatch):
    # A fresh process's state: another test in this worker may have logged the same choice.
    monkeypatch.setattr("txkafka.connector.sink.options._AUTO_LOGGED", set())
    assert _cfg("auto").producer == "txkafka"
    assert _cfg("auto", **UNSECURED_JWT).producer == "txkafka"
    with caplog.at_level(logging.INFO, logger="txkafka.writer"):
        assert _cfg("auto", **{"kafka.linger.ms": "20"}).producer == "librdkafka"
        assert _cfg("auto", **{"kafka.linger.ms": "20"}).producer == "librdkafka"
    said = [r.getMessage() for r in caplog.records if "producer=auto" in r.getMessage()]
    assert len(said) == 1 and "kafka.linger.ms" in said[0]  # once per process, not per batch


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_auto_leaves_a_login_txkafka_cannot_do_to_librdkafka(guarantee):
    # OAUTHBEARER from cloud metadata: librdkafka's only. The exactly-once sink's commit client
    # refuses it at start whichever producer the tasks use.
    cfg = _cfg("auto", deliveryGuarantee=guarantee, **{
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.oauthbearer.method": "oidc",
        "kafka.sasl.oauthbearer.metadata.authentication.type": "azure_imds"})
    assert cfg.producer == "librdkafka"


def test_an_unknown_producer_is_refused():
    with pytest.raises(KafkaConfigError, match="one of auto, txkafka, librdkafka, got 'java'"):
        _cfg("java")


def test_txkafka_s_login_is_checked_at_start_for_at_least_once_too():
    # Neither OAUTHBEARER token source: txkafka's connections could not log in, so every task
    # would fail; validate_at_start says so before it contacts the cluster.
    cfg = _cfg("txkafka", deliveryGuarantee="at_least_once", **{
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER"})
    with pytest.raises(KafkaConfigError, match="without a token source"):
        validate_at_start(cfg, schema=None, timeout_s=0.5)


# --------------------------------------------------------------------- delivery time-out

def test_message_timeout_zero_means_no_limit_as_in_librdkafka():
    assert delivery_timeout_ms({}) == 300_000
    assert delivery_timeout_ms({"message.timeout.ms": "0"}) == math.inf
    assert delivery_timeout_ms({"message.timeout.ms": "0"}, 60_000) == 60_000
    assert delivery_timeout_ms({"message.timeout.ms": "5000"}, 60_000) == 5_000
    assert delivery_timeout_ms({"delivery.timeout.ms": "7000"}) == 7_000


def test_the_wire_producer_s_delivery_limit_follows_message_timeout_ms():
    link = _Link()
    conf = {"bootstrap.servers": "h:1", "message.timeout.ms": "0"}
    assert WireProducer(conf, link=link).delivery_timeout_s == math.inf
    assert WireProducer(conf, link=link, transactional_id="t-0",
                        transaction_timeout_ms=45_000).delivery_timeout_s == 45.0
    assert WireProducer({**conf, "message.timeout.ms": "1500"}, link=link).delivery_timeout_s \
        == 1.5


# -------------------------------------------------------------------------- commitTimeoutMs

class _Conn:
    """A coordinator that is always still loading: InitProducerId is answered
    COORDINATOR_LOAD_IN_PROGRESS (retriable) forever."""

    def __init__(self) -> None:
        self.requests = 0

    def version_for(self, api: int, low: int, high: int) -> int:
        return high

    def throttle(self, throttle_ms: int) -> None:
        assert throttle_ms == 0

    def request(self, api: int, version: int, body, flexible: bool = True) -> Reader:
        self.requests += 1
        answer = Writer(True).int32(0).int16(COORDINATOR_LOAD_IN_PROGRESS).int64(-1).int16(-1)
        return Reader(answer.tags().build(), True)


class _Coordinators:
    def coordinator(self, tid: str, refresh: bool = False) -> tuple[str, int]:
        return "coordinator", 9092


class _Link:
    def __init__(self, timeout_s: float = 600.0) -> None:
        self.timeout_s = timeout_s
        self.conn = _Conn()
        self.coordinators = _Coordinators()

    def connection(self, host: str, port: int) -> _Conn:
        return self.conn

    def drop(self, conn) -> None:
        pass


def test_init_producer_id_is_retried_for_the_given_timeout_not_the_link_s(virtual_clock):
    """On the virtual clock the backoffs (10 ms doubling, at most 500 ms) fit about five requests
    into the given 0.3 s, and more than a thousand into the link's 600 s."""
    link = _Link(timeout_s=600.0)
    p = WireProducer({"bootstrap.servers": "h:1"}, transactional_id="t-0", link=link,
                     timeout_s=0.3)
    with pytest.raises(TransactionError, match="InitProducerId answered "
                                               "COORDINATOR_LOAD_IN_PROGRESS"):
        p.begin()
    # Retried, as a loading coordinator asks; and given up after the given timeout.
    assert 2 <= link.conn.requests <= 10, link.conn.requests


def test_the_task_s_producer_takes_commit_timeout_ms(monkeypatch):
    made: list[dict] = []

    class Recorder:
        def __init__(self, conf, **kw) -> None:
            made.append(kw)

        def begin(self) -> None:
            raise RuntimeError("stop here")

        def abort(self) -> None:
            pass

    monkeypatch.setattr(wire_writer, "WireProducer", Recorder)
    monkeypatch.setattr(wire_writer, "link_for", lambda conf: _Link())
    cfg = _cfg("txkafka", commitTimeoutMs="4500")
    w = wire_writer.WireKafkaWriter(cfg, validate_input_schema({"value": "binary"}, "out"),
                                    batch_id=0, partition_id=0, attempt=0,
                                    transactional_id="txkafka-s-0-0")
    import pyarrow as pa

    with pytest.raises(RuntimeError, match="stop here"):
        w.write([pa.RecordBatch.from_pydict({"value": pa.array([b"v"])})])
    assert made[0]["timeout_s"] == 4.5
