"""txkafka's own fetch without a broker: a scripted connection answers Metadata and Fetch, so the
retry, hand-off and shutdown rules are checked one by one; the worker's connection pool against a
fake broker on a socket (the real broker runs in integration_tests/test_reader_kafka.py)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.produce_sim import metadata_answer
from tests.record_batch_encoding import batch, records_of
from tests.test_coordinator_client_failures import brokers  # noqa: F401 (a fixture)
from txkafka.connector.client import fetcher as wire_fetcher
from txkafka.connector.client.connection import deadline_scope
from txkafka.connector.client.metadata import METADATA
from txkafka.connector.errors import KafkaProtocolError
from txkafka.connector.client.protocol import Reader, Writer
from txkafka.connector.client.fetcher import WireRange, _Links, read_range

TOPIC = "orders"
CONFIG = (("bootstrap.servers", "seed:9092"), ("group.id", "g-1"),
          ("isolation.level", "read_committed"))


def fetch_response(records: bytes | None, *, error: int = 0,
                   aborted: list[tuple[int, int]] | None = None, throttle_ms: int = 0) -> bytes:
    w = Writer(False).int32(throttle_ms).int16(0).int32(0)
    w.int32(1).string(TOPIC).int32(1)
    w.int32(0).int16(error).int64(100).int64(100).int64(0)
    if aborted is None:
        w.int32(-1)
    else:
        w.int32(len(aborted))
        for pid, first in aborted:
            w.int64(pid).int64(first)
    w.int32(-1).bytes_(records)
    return w.build()


def metadata_response(leader_host: str) -> bytes:
    w = Writer(True).int32(0)
    w.array([(1, leader_host, 9093)], lambda ww, b: ww.int32(b[0]).string(b[1]).int32(b[2])
            .string(None).tags())
    w.string("cluster").int32(1)

    def part(ww, _):
        ww.int16(0).int32(0).int32(1).int32(5)
        for _ in range(3):
            ww.array([1], lambda x, n: x.int32(n))
        ww.tags()

    def topic(ww, _):
        ww.int16(0).string(TOPIC).int64(0).int64(0).boolean(False).array([0], part).int32(0).tags()

    w.array([TOPIC], topic).tags()
    return w.build()


class ScriptedConn:
    """Answers Metadata with the leader, Fetch from ``script`` (bytes, or an exception raised)."""

    def __init__(self, script: list, host: str) -> None:
        self.script = script
        self.host = host
        self.fetch_offsets: list[int] = []
        self.metadata_calls = 0
        self.closed = False
        self.connected = True
        self.throttles: list[int] = []  # each answer's throttle_time_ms, as noted

    def connect(self, deadline=None):
        return self

    def version_for(self, api_key: int, lo: int, hi: int) -> int:
        return hi

    def throttle(self, throttle_ms: int) -> None:
        self.throttles.append(throttle_ms)

    def close(self) -> None:
        self.closed = True

    def request(self, api_key, version, body, *, flexible, deadline=None):
        if api_key == METADATA:
            self.metadata_calls += 1
            return Reader(metadata_response("leader"), True)
        r = Reader(body, False)
        for _ in range(7):  # replica, wait, min, max bytes, isolation, session id, epoch
            r.int8() if _ == 4 else r.int32()
        r.int32(), r.string(), r.int32(), r.int32(), r.int32()
        self.fetch_offsets.append(r.int64())
        if not self.script:
            raise AssertionError("fetched more than the script holds")
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return Reader(item, False)


class ScriptedLinks(_Links):
    def __init__(self, conn: ScriptedConn) -> None:
        super().__init__()
        self.conn = conn
        self.hosts: list[str] = []

    def connection(self, config, host, port):
        self.hosts.append(host)
        return self.conn


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(wire_fetcher, "_BACKOFF_S", 0.0)
    monkeypatch.setattr(wire_fetcher, "_RETRY_BUDGET_S", 0.0)  # the count of retries decides


def run(script, start=0, end=10):
    conn = ScriptedConn(script, "leader")
    links = ScriptedLinks(conn)
    wr = WireRange(TOPIC, 0, start, end, CONFIG, links=links)
    offsets = [int(o) for d in read_range(wr) for o in d.offsets]
    return wr, conn, links, offsets


def test_reads_the_range_from_the_leader_one_response_at_a_time():
    first = batch(0, records_of([b"a"] * 6))
    second = batch(6, records_of([b"b"] * 6))  # 10 and 11 are past the range
    wr, conn, links, offsets = run([fetch_response(first), fetch_response(second)])
    assert offsets == list(range(10))
    assert wr.handoff is None
    assert conn.fetch_offsets == [0, 6]
    assert links.hosts[0] == "seed" and set(links.hosts[1:]) == {"leader"}
    assert conn.metadata_calls == 1  # the leader is remembered
    # group.id is per query: connections and leaders are keyed without it.
    assert "group.id" not in dict(wr.config)


@pytest.mark.parametrize("code", [6, 74, 5])  # NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...
def test_a_leader_move_looks_the_leader_up_again_and_retries(code):
    data = batch(0, records_of([b"a"] * 10))
    wr, conn, _, offsets = run([fetch_response(None, error=code), fetch_response(data)])
    assert offsets == list(range(10)) and wr.handoff is None
    assert conn.fetch_offsets == [0, 0] and conn.metadata_calls == 2


def test_a_broken_connection_is_retried_then_handed_over():
    data = batch(0, records_of([b"a"] * 4))
    down = KafkaProtocolError("connection to leader:9093 failed during API 1: reset")
    wr, conn, _, offsets = run([fetch_response(data)] + [down] * (wire_fetcher._RETRIES + 1))
    assert offsets == [0, 1, 2, 3]
    assert wr.handoff == 4 and "reset" in wr.handoff_reason
    assert conn.fetch_offsets == [0] + [4] * (wire_fetcher._RETRIES + 1)


def test_offset_out_of_range_goes_to_the_librdkafka_reader_at_once():
    wr, conn, _, offsets = run([fetch_response(None, error=1)], start=3)
    assert offsets == [] and wr.handoff == 3
    assert "OFFSET_OUT_OF_RANGE" in wr.handoff_reason and conn.fetch_offsets == [3]


def test_no_records_where_the_range_expects_them_is_handed_over():
    wr, _, _, offsets = run([fetch_response(batch(0, records_of([b"a"] * 5))),
                             fetch_response(None)])
    assert offsets == [0, 1, 2, 3, 4]
    assert wr.handoff == 5 and wr.handoff_reason == "no records where the range expects them"


def throttled_fetch_response(throttle_ms: int) -> bytes:
    """What a broker enforcing a fetch or request quota answers (KIP-219): at once, with the
    throttle time and no partitions; it reads the connection again once that time has passed."""
    return Writer(False).int32(throttle_ms).int16(0).int32(0).int32(0).build()


def test_a_throttled_fetch_is_asked_again_not_handed_over():
    first = batch(0, records_of([b"a"] * 4))
    rest = batch(4, records_of([b"b"] * 6))
    wr, conn, _, offsets = run([fetch_response(first, throttle_ms=700),
                                throttled_fetch_response(900), fetch_response(rest)])
    assert offsets == list(range(10)) and wr.handoff is None
    assert conn.fetch_offsets == [0, 4, 4]
    assert conn.throttles == [0, 700, 900, 0]  # Metadata, then each Fetch: noted, waited out


def test_a_corrupt_response_is_handed_over_not_raised():
    bad = bytearray(batch(0, records_of([b"a"] * 5)))
    bad[16] = 1  # magic v1
    wr, _, _, offsets = run([fetch_response(bytes(bad))])
    assert offsets == [] and wr.handoff == 0 and "message format v1" in wr.handoff_reason


def test_aborted_transactions_of_the_response_are_dropped():
    from tests.record_batch_encoding import control_batch

    records = (batch(0, records_of([b"x"] * 3), transactional=True, producer_id=7)
               + control_batch(3, 7, commit=False)
               + batch(4, records_of([b"y"] * 6)))
    wr, _, _, offsets = run([fetch_response(records, aborted=[(7, 0)])])
    assert offsets == [4, 5, 6, 7, 8, 9] and wr.handoff is None


def test_closing_the_reader_early_stops_the_fetch_thread():
    responses = [fetch_response(batch(i * 2, records_of([b"a"] * 2))) for i in range(50)]
    conn = ScriptedConn(responses, "leader")
    wr = WireRange(TOPIC, 0, 0, 100, CONFIG, links=ScriptedLinks(conn))
    before = {t.name for t in threading.enumerate()}
    it = read_range(wr)
    next(it)
    it.close()
    assert not [t for t in threading.enumerate()
                if t.name.startswith("txkafka-fetch") and t.name not in before]
    assert len(conn.fetch_offsets) < 50  # it stopped asking


def test_connections_are_kept_per_broker_and_capped():
    links = _Links()
    links.MAX_CONNS = 2
    made = [links.connection(CONFIG, f"h{i}", 9092) for i in range(3)]
    assert made[0].closed and not made[1].closed and not made[2].closed
    assert links.connection(CONFIG, "h2", 9092) is made[2]
    links.close_all()
    assert made[2].closed


def test_a_worker_s_connections_of_one_config_share_one_token_source():
    """One OIDC token source per client config: each connection built its own SecurityConfig,
    so each fetched a token of its own from the identity provider."""
    oidc = (("bootstrap.servers", "127.0.0.1:1"), ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.client.id", "reader"), ("sasl.oauthbearer.client.secret", "s"),
            ("sasl.oauthbearer.method", "oidc"),
            ("sasl.oauthbearer.token.endpoint.url", "https://idp.example/token"),
            ("security.protocol", "SASL_SSL"))
    links = _Links()
    try:
        a, b = links.connection(oidc, "h1", 9092), links.connection(oidc, "h2", 9092)
        assert a.security.oauthbearer is not None
        assert b.security.oauthbearer is a.security.oauthbearer
        other = links.connection(oidc + (("client.id", "x"),), "h1", 9092)
        assert other.security.oauthbearer is not a.security.oauthbearer  # another config
    finally:
        links.close_all()


def test_a_leader_look_up_that_only_waited_for_the_shared_connection_leaves_it_open(
        brokers):  # noqa: F811
    """Another range's slow request holds the worker's connection to a broker past a leader
    look-up's deadline: the look-up fails, and the connection stays open and pooled. (It was
    closed: the other ranges reading from that broker lost it too, and paid a new login.)"""
    b = brokers()
    b.handlers[METADATA] = lambda n, body: metadata_answer([(1, "127.0.0.1", b.port)],
                                                           [(TOPIC, 0, {0: 1})])
    release = threading.Event()

    def slow(n: int, body: Reader) -> bytes:
        release.wait(10)
        return Writer(True).int32(0).int16(0).int64(7).int16(0).tags().build()

    b.handlers[22] = slow  # (InitProducerId: any request the broker holds will do)
    links = _Links()
    wr = WireRange(TOPIC, 0, 0, 10, (("bootstrap.servers", f"127.0.0.1:{b.port}"),), links=links)
    conn = links.connection(wr.config, "127.0.0.1", b.port).connect()
    body = Writer(True).string("tid").int32(60000).int64(-1).int16(-1).tags().build()
    answered: list[object] = []
    other = threading.Thread(target=lambda: answered.append(conn.request(
        22, 4, body, flexible=True, deadline=time.monotonic() + 10)))
    other.start()
    try:
        waiting_until = time.monotonic() + 10
        while not any(key == 22 for _, key, _ in b.log):
            assert time.monotonic() < waiting_until, "the slow request never reached the broker"
            time.sleep(0.01)
        with deadline_scope(0.3), pytest.raises(
                KafkaProtocolError, match="timed out waiting for the connection"):
            wr._leader(refresh=True)
    finally:
        release.set()
        other.join(10)
    try:
        assert answered and not conn.closed
        assert wr._leader(refresh=True) == ("127.0.0.1", b.port)
        assert links.connection(wr.config, "127.0.0.1", b.port) is conn
    finally:
        links.close_all()


def test_a_leader_down_longer_than_the_retries_is_retried_within_the_budget(monkeypatch):
    """A crashed leader stays in the metadata until the controller fences it (9 s by default):
    eight quick retries ran out in about 4 s, and the range went to the slower librdkafka reader
    although the new leader was about to answer."""
    clock = [0.0]
    monkeypatch.setattr(wire_fetcher, "time", type("VirtualTime", (), {
        "monotonic": staticmethod(lambda: clock[0]),
        "sleep": staticmethod(lambda s: clock.__setitem__(0, clock[0] + s))}))
    monkeypatch.setattr(wire_fetcher, "_BACKOFF_S", 0.1)
    monkeypatch.setattr(wire_fetcher, "_RETRY_BUDGET_S", 15.0)
    down = KafkaProtocolError("cannot connect to broker leader:9093: connection refused")
    data = batch(0, records_of([b"a"] * 10))
    wr, conn, _, offsets = run([down] * (wire_fetcher._RETRIES + 4) + [fetch_response(data)])
    assert offsets == list(range(10)) and wr.handoff is None
    # Retried past the count, within the budget.
    assert len(conn.fetch_offsets) == wire_fetcher._RETRIES + 5 and clock[0] < 15.0


class TwoHosts(_Links):
    """The bootstrap server "seed" answers Metadata once, then is down; "leader" answers both."""

    def __init__(self, script: list) -> None:
        super().__init__()
        self.seed = ScriptedConn([], "seed")
        self.leader = ScriptedConn(script, "leader")
        self.seed_down = False
        self.asked: list[str] = []

    def connection(self, config, host, port):
        self.asked.append(host)
        conn = self.seed if host == "seed" else self.leader
        if host == "seed" and self.seed_down:
            raise KafkaProtocolError("cannot connect to broker seed:9092: connection refused")
        if host == "seed":
            self.seed_down = True  # down after its first answer (a rolling restart)
        return conn


def test_the_leader_is_looked_up_at_a_broker_seen_when_the_bootstrap_one_is_down():
    data = batch(0, records_of([b"a"] * 10))
    links = TwoHosts([fetch_response(None, error=6), fetch_response(data)])
    wr = WireRange(TOPIC, 0, 0, 10, CONFIG, links=links)
    assert [int(o) for d in read_range(wr) for o in d.offsets] == list(range(10))
    assert wr.handoff is None
    # The second look-up: the bootstrap server failed, the broker its answer named was asked.
    assert links.asked[:2] == ["seed", "leader"] and links.asked.count("seed") == 2
    assert links.leader.metadata_calls == 1


def test_fetch_requests_carry_the_users_fetch_settings():
    """kafka.fetch.min.bytes reaches the broker (it is on the wire fetcher's allow-list), with
    the long-poll and sizes; unset, the broker answers as soon as it has a byte."""
    import struct

    def header(config):
        wr = WireRange("t", 0, 0, 10, config)
        return struct.unpack(">iiii", wr._request(0)[:16])

    assert header(CONFIG) == (-1, 100, 1, 50 << 20)
    assert header(CONFIG + (("fetch.min.bytes", "65536"), ("fetch.wait.max.ms", "250"))) == \
        (-1, 250, 65536, 50 << 20)
