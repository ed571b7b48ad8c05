"""txkafka's producer at the request level, one defect per test, against the simulated cluster
(tests/produce_sim.py) with its real sender threads: no empty Produce request; the partition map
changed only under the lock; no EndTxn while a Produce request is in flight; at_least_once's
delivery limit counted per batch; a pipelined answer waits for the request's own timeout, not the
connection's per-read cap; Metadata and an idempotent InitProducerId asked of every broker in turn
(also against fake brokers on sockets), until the delivery timeout, then a typed error naming
them; coordinator lookups asking every broker the link knows, within the producer's budget; a
partition the coordinator does not know yet added again; a transaction whose AddPartitionsToTxn
went unanswered aborted; a connection that only waited for its lock kept; a busy Produce
connection's login renewed before its session ends, and a slow login's session counted from its
last SaslAuthenticate."""

from __future__ import annotations

import random
import threading
import time

import pyarrow as pa
import pytest

from tests.produce_sim import (
    Faults,
    SimCluster,
    SimLink,
    StepRunner,
    VirtualClock,
    metadata_answer,
    produce_answer,
)
from tests.test_coordinator_client_failures import (  # noqa: F401 (brokers: a fixture)
    END_TXN,
    FIND_COORDINATOR,
    METADATA,
    OFFERED,
    Hangup,
    brokers,
)
from txkafka.connector.client import connection as broker_connection
from txkafka.connector.client.connection import BrokerConnection, SecurityConfig
from txkafka.connector.client.error_codes import (
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from txkafka.connector.errors import (
    BrokersUnavailableError,
    KafkaConfigError,
    KafkaAuthorizationError,
    KafkaProtocolError,
    TransactionError,
)
from txkafka.connector.client.protocol import Reader, Writer
from txkafka.connector.client.producer import (
    ADD_PARTITIONS_TO_TXN,
    INIT_PRODUCER_ID,
    PRODUCE,
    ClusterLink,
    WireProducer,
)


def _producer(cluster: SimCluster, *, tid: str | None = "sim-0", **conf: str) -> WireProducer:
    p = WireProducer({"bootstrap.servers": "sim:9092", "batch.size": "300", **conf},
                     transactional_id=tid, link=SimLink(cluster), where="test task")
    p.begin()
    return p


def _values(start: int, n: int) -> pa.Array:
    return pa.array([b"%08d" % i for i in range(start, start + n)], pa.binary())


def _to(partition: int, n: int) -> pa.Array:
    return pa.array([partition] * n, pa.int32())


def test_no_produce_request_is_empty():
    cluster = SimCluster(random.Random(1), Faults(), topics={"t": 3})
    p = _producer(cluster)
    for start in range(0, 3000, 500):
        p.send("t", _values(start, 500))
    res = p.flush()
    p.close()
    assert res.record_count == 3000
    assert cluster.stats.produce_requests > 0
    assert cluster.stats.empty_requests == 0
    assert sorted(v for k in cluster.logs for v in cluster.written(k)) == \
        _values(0, 3000).to_pylist()


def test_the_partition_map_changes_only_under_the_lock():
    """Senders walk the partition map under the producer's lock while the task's thread adds
    partitions to it: an addition without the lock fails a sender ("dictionary changed size
    during iteration")."""
    cluster = SimCluster(random.Random(2), Faults(), topics={"t": 8})
    p = _producer(cluster)
    unlocked: list[tuple] = []

    class Watched(dict):
        def __setitem__(self, key, value) -> None:
            if not p._cv._is_owned():
                unlocked.append(key)
            super().__setitem__(key, value)

    p._parts = Watched()
    for part in range(8):
        p.send("t", _values(part * 100, 100), partitions=_to(part, 100))
    p.flush()
    p.close()
    assert unlocked == []


def test_abort_waits_for_the_produce_requests_in_flight():
    """A fatal answer for one partition fails the task while another broker still has Produce
    requests of the transaction: EndTxn(abort) goes out only once they are answered, as the
    Java client holds EndTxn until no batch is incomplete. (A Produce handled after the abort
    would reopen the transaction on its partition, a hanging transaction.)"""
    cluster = SimCluster(random.Random(3), Faults(), topics={"t": 2}, nodes=(1, 2))
    assert cluster.leaders == {("t", 0): 1, ("t", 1): 2}
    cluster.answer_delay_s[2] = 0.15
    cluster.scripted[("t", 0, 0, 1)] = "denied"
    p = _producer(cluster)
    p.send("t", _values(0, 50), partitions=_to(1, 50))
    deadline = time.monotonic() + 10
    while cluster.stats.batches_sent == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    p.send("t", _values(50, 2000), partitions=_to(1, 2000))  # several requests in flight
    time.sleep(0.2)
    with pytest.raises(KafkaAuthorizationError, match="TOPIC_AUTHORIZATION_FAILED"):
        # (the send itself raises it when node 1's sender has the answer before send returns)
        p.send("t", _values(2050, 10), partitions=_to(0, 10))
        p.flush()
    p.abort()
    p.close()
    assert cluster.end_txn_calls == [(False, 0)], cluster.violations


def test_a_success_after_a_sure_refusal_fails_the_task_instead_of_skipping_the_refused():
    """A later batch's acknowledgement proves the earlier ones were appended only while the
    broker checks this producer's sequences. One that refused batch k (NOT_ENOUGH_REPLICAS:
    not appended) and then lost the producer's state accepts batch k+1 (pipelined behind it):
    taking k as delivered would skip its records with nothing said."""
    clock = VirtualClock()
    cluster = SimCluster(random.Random(0), Faults(), topics={"t": 1}, clock=clock)
    p = WireProducer({"bootstrap.servers": "sim:9092", "batch.size": "150"},
                     transactional_id="sim-0", link=SimLink(cluster), where="test task")
    p._runner = StepRunner(random.Random(0), clock, receive_bias=0.0)  # requests pipelined
    p._sticky_rng = random.Random(1)
    p.begin()
    p.send("t", _values(0, 200))
    k = [b.seq for b in p._parts[("t", 0)].queue][3]
    cluster.scripted[("t", 0, k, 1)] = "refuse_and_forget"
    with pytest.raises(TransactionError, match=rf"after refusing the \d+ before them "
                                               rf"\(sequence {k}: NOT_ENOUGH_REPLICAS\)"):
        p.flush()
    assert cluster.stats.faults.get("state_lost") == 1
    p.abort()
    p.close()


def test_a_batch_that_fails_to_encode_spends_no_sequence_number(monkeypatch):
    """The pooled idempotent producer id goes on to the next task with its sequences: one spent
    on a batch never sent would make that task's first batch OUT_OF_ORDER_SEQUENCE_NUMBER."""
    from txkafka.connector.client import producer as producer_module

    cluster = SimCluster(random.Random(5), Faults(), topics={"t": 1})
    p = _producer(cluster, tid=None)
    real = producer_module.batch_pieces
    calls = []

    def once_broken(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("an encoder failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(producer_module, "batch_pieces", once_broken)
    with pytest.raises(ValueError, match="an encoder failure"):
        p.send("t", _values(0, 40))
    p.flush()
    delivered = sum(b.count for b in p._parts[("t", 0)].queue) + len(cluster.written(("t", 0)))
    assert p._idem.sequences[("t", 0)] == delivered > 0


def test_at_least_once_counts_the_delivery_limit_per_batch_not_per_task():
    """message.timeout.ms bounds each record's delivery (librdkafka's rule), so a task writing
    for longer than that succeeds when each batch is delivered in time, retries included.
    (On the model's virtual clock: no real waiting, no timing in the outcome.)"""
    clock = VirtualClock()
    cluster = SimCluster(random.Random(4), Faults(), topics={"t": 1}, clock=clock)
    p = WireProducer({"bootstrap.servers": "sim:9092", "batch.size": "300",
                      "message.timeout.ms": "400"}, link=SimLink(cluster), where="test task")
    p._runner = StepRunner(random.Random(4), clock)
    p.begin()
    p.send("t", _values(0, 20))
    p.flush()
    clock.advance(0.5)  # the task goes on writing past message.timeout.ms since its first send
    first_new = sum(b.count for b in cluster.logs[("t", 0)])
    cluster.scripted[("t", 0, first_new, 1)] = "refuse"  # one retriable answer, then delivered
    p.send("t", _values(20, 20))
    p.flush()
    p.close()
    assert cluster.written(("t", 0)) == _values(0, 40).to_pylist()
    assert cluster.stats.faults.get("refuse") == 1


def test_a_pipelined_answer_waits_for_the_request_s_deadline_not_the_per_read_cap(brokers):  # noqa: F811
    """An acks=all Produce may wait at the broker up to request.timeout.ms: its answer is read
    until the deadline the producer gives (from that timeout), not given up after the
    connection's per-read cap (ATTEMPT_TIMEOUT_S, made short here)."""
    broker = brokers()

    def slow_end_txn(n, body) -> bytes:
        time.sleep(3.0)  # well past the cap below, which must still cover a loaded handshake
        return Writer(True).int32(0).int16(0).tags().build()

    broker.handlers[END_TXN] = slow_end_txn
    conn = BrokerConnection("127.0.0.1", broker.port, SecurityConfig(), timeout=1.0)
    body = Writer(True).string("t").int64(7).int16(0).boolean(False).tags().build()
    cid = conn.send_pipelined(END_TXN, 3, body, flexible=True)
    r = conn.receive_pipelined(cid, END_TXN, flexible=True, deadline=time.monotonic() + 10)
    r.int32()
    assert r.int16() == 0
    conn.close()


def test_a_pipelined_request_is_written_within_the_deadline_not_the_per_write_cap(brokers):  # noqa: F811
    """A broker reads a connection's next request only after answering the one before, which
    an acks=all Produce may hold up to request.timeout.ms: a request larger than the socket
    buffers waits that long to be written. With the producer's deadline it is; the per-write cap
    alone (ATTEMPT_TIMEOUT_S, short here) broke the connection, and every request went again."""
    broker = brokers()

    def slow_end_txn(n, body) -> bytes:
        time.sleep(3.0)  # well past the cap below, which must still cover a loaded handshake
        return Writer(True).int32(0).int16(0).tags().build()

    broker.handlers[END_TXN] = slow_end_txn
    small = Writer(True).string("t").int64(7).int16(0).boolean(False).tags().build()
    large = small + bytes(48 << 20)  # far past loopback's socket buffers

    def pipeline(deadline: float | None) -> None:
        conn = BrokerConnection("127.0.0.1", broker.port, SecurityConfig(), timeout=1.0)
        try:
            first = conn.send_pipelined(END_TXN, 3, small, flexible=True)
            second = conn.send_pipelined(END_TXN, 3, large, flexible=True, deadline=deadline)
            for cid in (first, second):
                r = conn.receive_pipelined(cid, END_TXN, flexible=True,
                                           deadline=time.monotonic() + 10)
                r.int32()
                assert r.int16() == 0
        finally:
            conn.close()

    with pytest.raises(KafkaProtocolError):
        pipeline(None)  # the scenario: the write outlasts the cap
    pipeline(time.monotonic() + 10)


# ------------------------------------------------ brokers failing while metadata is asked for


def test_a_task_s_metadata_comes_from_the_third_broker_when_two_fail_in_a_row():
    """Metadata at the first broker fails, at the next one too (two brokers restarting): the
    third answers and the task writes. (The link asked again only once, and at the broker that
    had just failed: the task failed.)"""
    cluster = SimCluster(random.Random(5), Faults(), topics={"t": 3})
    cluster.metadata_down = {1, 2}
    p = _producer(cluster)
    p.send("t", _values(0, 600))
    res = p.flush()
    p.close()
    assert res.record_count == 600
    assert sorted(v for k in cluster.logs for v in cluster.written(k)) == _values(0, 600).to_pylist()
    assert cluster.metadata_requests[1] >= 1 and cluster.metadata_requests[2] >= 1
    # Once the link knows 1 and 2 failed, it asks 3 first, not them again.
    assert cluster.metadata_requests == {1: 1, 2: 1, 3: cluster.metadata_requests[3]}


def test_no_broker_answering_metadata_within_the_delivery_timeout_is_a_typed_error_naming_them():
    """Every broker fails Metadata (a cluster restarting as a whole): the task's producer asks
    each in turn, round after round with back-off, for the delivery timeout (on the model's
    virtual clock), then fails with BrokersUnavailableError naming each broker and the setting."""
    clock = VirtualClock()
    cluster = SimCluster(random.Random(6), Faults(), topics={"t": 1}, clock=clock)
    cluster.metadata_down = {1, 2, 3}
    p = WireProducer({"bootstrap.servers": "sim:9092", "message.timeout.ms": "5000"},
                     transactional_id="sim-0", link=SimLink(cluster), where="test task")
    p._runner = StepRunner(random.Random(6), clock)
    p.begin()
    started = clock.now
    with pytest.raises(BrokersUnavailableError, match="kafka.message.timeout.ms") as info:
        p.send("t", _values(0, 10))
    p.close()
    assert info.value.brokers == ("broker-1:9092", "broker-2:9092", "broker-3:9092")
    for node in (1, 2, 3):
        assert f"broker-{node}:9092 (connection to broker {node} reset" in str(info.value)
        assert cluster.metadata_requests[node] > 2, "asked round after round"
    assert clock.now - started >= 5  # virtual seconds: the whole delivery timeout was used


def _topic_answer(*ports: int, leader: int) -> bytes:
    """Metadata naming nodes 1.. at ``ports`` on 127.0.0.1, and topic "t" of one partition."""
    return metadata_answer([(i + 1, "127.0.0.1", port) for i, port in enumerate(ports)],
                           [("t", 0, {0: leader})])


def test_the_link_asks_past_a_broker_that_hangs_up_and_one_that_hangs(brokers, monkeypatch):
    """Real connections to fake brokers: the first closes the connection at Metadata (a broker
    shutting down), the second never answers it (SIGSTOPped: the connection's attempt timeout,
    made short here), the third answers. Each failed broker is asked once."""
    monkeypatch.setattr(broker_connection, "ATTEMPT_TIMEOUT_S", 0.3)
    closing, hung, good = brokers(), brokers(), brokers()

    def hang_up(n, body) -> bytes:
        raise Hangup

    def hang(n, body) -> bytes:
        time.sleep(2)
        raise Hangup

    closing.handlers[METADATA] = hang_up
    hung.handlers[METADATA] = hang
    good.handlers[METADATA] = lambda n, body: _topic_answer(
        closing.port, hung.port, good.port, leader=3)
    link = ClusterLink({"bootstrap.servers": ",".join(
        f"127.0.0.1:{b.port}" for b in (closing, hung, good))}, timeout_s=30)
    try:
        info = link.topic("t")
    finally:
        link.close()
    assert (info.partitions, info.leaders) == (1, {0: 3})
    asked = [sum(1 for _, key, _ in b.log if key == METADATA) for b in (closing, hung, good)]
    assert asked == [1, 1, 1]


def test_a_frozen_broker_s_open_connection_does_not_use_up_a_short_budget(brokers):
    """The link's open connection goes to a broker that then freezes (SIGSTOP: the connection
    stays open, Metadata is never answered) and the budget (a delivery timeout of 3 s) is shorter
    than the connection's attempt cap (10 s): the frozen broker gets its share of the budget,
    then the next one answers. (The first attempt took the whole budget: the task failed.)"""
    frozen, good = brokers(), brokers()
    asked = {"n": 0}

    def freeze_after_first(n, body) -> bytes:
        asked["n"] += 1
        if asked["n"] > 1:
            time.sleep(5)
            raise Hangup
        return _topic_answer(frozen.port, good.port, leader=1)

    frozen.handlers[METADATA] = freeze_after_first
    good.handlers[METADATA] = lambda n, body: _topic_answer(frozen.port, good.port, leader=2)
    link = ClusterLink({"bootstrap.servers": f"127.0.0.1:{frozen.port},127.0.0.1:{good.port}"})
    try:
        assert link.topic("t").leaders == {0: 1}  # the connection to the first is open now
        assert link.topic("t", refresh=True, timeout_s=3).leaders == {0: 2}
    finally:
        link.close()


def test_an_idempotent_producer_id_is_asked_of_another_broker_after_one_failed(brokers):
    """InitProducerId of an idempotent producer goes to any broker: the first bootstrap broker
    closes the connection at it (it connects fine), so the retry asks the next broker rather than
    the one that just failed. (Before, every retry went to the first one, until the timeout.)"""
    failing, good = brokers(), brokers()

    def hang_up(n, body) -> bytes:
        raise Hangup

    failing.handlers[INIT_PRODUCER_ID] = hang_up
    good.handlers[INIT_PRODUCER_ID] = lambda n, body: (
        Writer(True).int32(0).int16(0).int64(77).int16(3).tags().build())
    conf = {"bootstrap.servers": f"127.0.0.1:{failing.port},127.0.0.1:{good.port}"}
    link = ClusterLink(conf)
    try:
        p = WireProducer(conf, link=link, where="test task", timeout_s=5)
        assert p.begin() == (77, 3)
    finally:
        link.close()
    assert sum(1 for _, key, _ in failing.log if key == INIT_PRODUCER_ID) == 1


# --------------------------------------------- the link's coordinator lookups and connections
# Fake brokers on sockets; where only the client's own clock matters, on the virtual clock
# (tests/conftest.py): waits and retries take no real time, and the machine's load cannot
# stretch them.

PRODUCER_OFFERED = OFFERED + [(PRODUCE, 9, 11), (ADD_PARTITIONS_TO_TXN, 3, 3)]


def _producer_id(n: int, body: Reader) -> bytes:
    return Writer(True).int32(0).int16(0).int64(77).int16(3).tags().build()


def _coordinator_from(broker, ready) -> object:
    """A FindCoordinator handler naming ``broker``; COORDINATOR_NOT_AVAILABLE until ready()."""

    def find(n: int, body: Reader) -> bytes:
        body.int8()
        keys = body.array(lambda r: r.string())
        err = 0 if ready() else COORDINATOR_NOT_AVAILABLE
        return Writer(True).int32(0).array(keys, lambda w, k: w.string(k).int32(1).string(
            "127.0.0.1").int32(broker.port).int16(err).string(None).tags()).tags().build()

    return find


def _add_partitions(code) -> object:
    """An AddPartitionsToTxn (v3) handler answering every partition code() (called per request)."""

    def add(n: int, body: Reader) -> bytes:
        body.string()
        body.int64()
        body.int16()
        topics = body.array(lambda r: (r.string(), r.array(lambda rr: rr.int32()), r.tags())[:2])
        err = code()
        return Writer(True).int32(0).array(topics, lambda w, tp: w.string(tp[0]).array(
            tp[1], lambda ww, p: ww.int32(p).int16(err).tags()).tags()).tags().build()

    return add


def _produce_ok(n: int, body: Reader) -> bytes:
    """A Produce (v9+) handler appending every batch."""
    body.string()
    body.int16()
    body.int32()
    answer = {}
    for _ in range(body.uvarint() - 1):
        name = body.string() or ""
        for _ in range(body.uvarint() - 1):
            p = body.int32()
            body.view(body.uvarint() - 1)
            body.tags()
            answer[(name, p)] = 0
        body.tags()
    return produce_answer(answer, 0)


def test_coordinator_lookups_ask_the_brokers_metadata_named_once_the_bootstrap_one_is_gone(
        brokers, virtual_clock):  # noqa: F811
    """One bootstrap address (a load balancer's name, a managed service's) whose broker
    restarts: FindCoordinator goes to a broker the link's Metadata named, as the Java client and
    librdkafka send it to any known broker. (The lookup asked the bootstrap broker and
    coordinators found before only: a task's InitProducerId failed after the whole budget.)"""
    b0, b1 = brokers(), brokers()
    for b in (b0, b1):
        b.handlers[METADATA] = lambda n, body: _topic_answer(b0.port, b1.port, leader=2)
        b.handlers[INIT_PRODUCER_ID] = _producer_id
    conf = {"bootstrap.servers": f"127.0.0.1:{b0.port}"}
    link = ClusterLink(conf, timeout_s=3.0)
    try:
        assert WireProducer(conf, transactional_id="a", link=link, timeout_s=3).begin() == (77, 3)
        assert link.topic("t").leaders == {0: 2}  # a task's first send: both brokers named
        b0.close()
        assert WireProducer(conf, transactional_id="b", link=link, timeout_s=3).begin() == (77, 3)
        assert link.coordinators.coordinator("b") == ("127.0.0.1", b1.port)
    finally:
        link.close()
    assert any(key == FIND_COORDINATOR for _, key, _ in b1.log)


def test_a_link_and_its_coordinator_client_share_one_token_source():
    """One OIDC token source per link: its coordinator client used to read the settings again,
    and fetched a token of its own."""
    link = ClusterLink({
        "bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "writer", "sasl.oauthbearer.client.secret": "s",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token"})
    assert link.security.oauthbearer is not None
    assert link.coordinators.security.oauthbearer is link.security.oauthbearer


def test_a_coordinator_lookup_is_retried_for_the_producer_s_budget_not_the_link_s(
        brokers, virtual_clock):  # noqa: F811
    """FindCoordinator answers COORDINATOR_NOT_AVAILABLE (the coordinator's partition has no
    leader for a while) for longer than the link's timeout (1 s here; 30 s by default) and less
    than the producer's budget (commitTimeoutMs): the task starts. (The lookup's error at the
    link's timeout escaped the producer's retries, while no broker answering at all was retried
    for the whole budget.) Past the budget, the producer's own error, as for no answer."""
    b = brokers()
    available_at = time.monotonic() + 2.0
    b.handlers[FIND_COORDINATOR] = _coordinator_from(b, lambda: time.monotonic() >= available_at)
    b.handlers[INIT_PRODUCER_ID] = _producer_id
    conf = {"bootstrap.servers": f"127.0.0.1:{b.port}"}
    link = ClusterLink(conf, timeout_s=1.0)
    try:
        assert WireProducer(conf, transactional_id="t", link=link, timeout_s=10).begin() == (77, 3)
        available_at = float("inf")
        with pytest.raises(TransactionError, match=r"starting transaction u: InitProducerId "
                                                   r"answered COORDINATOR_NOT_AVAILABLE \(last: "
                                                   r"no transaction coordinator for \['u'\]"):
            WireProducer(conf, transactional_id="u", link=link, timeout_s=3).begin()
    finally:
        link.close()


def test_adding_partitions_looks_the_coordinator_up_for_the_producer_s_budget(
        brokers, virtual_clock):  # noqa: F811
    """The coordinator moves (AddPartitionsToTxn answers NOT_COORDINATOR) and the new one is
    not available for longer than the link's timeout: the partition is added within the
    producer's budget, and the records written."""
    b = brokers(offered=PRODUCER_OFFERED)
    available_at = -float("inf")
    answers = [NOT_COORDINATOR]

    def moved() -> int:
        nonlocal available_at
        if answers:
            available_at = time.monotonic() + 2.0
            return answers.pop()
        return 0

    b.handlers[FIND_COORDINATOR] = _coordinator_from(b, lambda: time.monotonic() >= available_at)
    b.handlers[INIT_PRODUCER_ID] = _producer_id
    b.handlers[METADATA] = lambda n, body: _topic_answer(b.port, leader=1)
    b.handlers[ADD_PARTITIONS_TO_TXN] = _add_partitions(moved)
    b.handlers[PRODUCE] = _produce_ok
    conf = {"bootstrap.servers": f"127.0.0.1:{b.port}"}
    link = ClusterLink(conf, timeout_s=1.0)
    p = WireProducer(conf, transactional_id="t", link=link, timeout_s=30)
    try:
        p.begin()
        p.send("t", _values(0, 10), partitions=_to(0, 10))
        assert p.flush().record_count == 10
    finally:
        p.close()  # senders stopped even on failure: else they sleep on the next test's clock
        link.close()
    assert answers == []  # the coordinator did move
    assert sum(1 for _, key, _ in b.log if key == FIND_COORDINATOR) > 2


def test_a_partition_the_coordinator_does_not_know_yet_is_added_again():
    """AddPartitionsToTxn answers UNKNOWN_TOPIC_OR_PARTITION while the coordinator's metadata
    lacks the partition (a topic just created, partitions just added, a lagging coordinator):
    asked again, as librdkafka and the Java client do, and the task writes. (It failed the task
    with "topic does not exist".)"""
    cluster = SimCluster(random.Random(1), Faults(), topics={"t": 3})
    cluster.add_partitions_answers = [UNKNOWN_TOPIC_OR_PARTITION]
    p = _producer(cluster)
    p.send("t", _values(0, 100), partitions=_to(0, 100))
    assert p.flush().record_count == 100
    p.close()
    assert cluster.add_partitions_answers == []
    assert cluster.written(("t", 0)) == _values(0, 100).to_pylist()


def test_a_partition_the_coordinator_never_knows_fails_after_the_propagation_patience(
        virtual_clock):
    """A topic deleted after the task's Metadata found it: asked again for
    kafka.topic.metadata.propagation.max.ms (2 s here), then the error names the topic and the
    setting."""
    cluster = SimCluster(random.Random(1), Faults(), topics={"t": 3})
    cluster.add_partitions_answers = [UNKNOWN_TOPIC_OR_PARTITION] * 1000
    link = SimLink(cluster)
    link.conf["topic.metadata.propagation.max.ms"] = "2000"
    p = WireProducer({"bootstrap.servers": "sim:9092"}, transactional_id="sim-0", link=link,
                     where="test task")
    p.begin()
    started = time.monotonic()
    with pytest.raises(TransactionError, match=r"topic 't' does not exist \(UNKNOWN_TOPIC_OR_PAR"
                                               r"TITION, still after 2s: kafka.topic.metadata."
                                               r"propagation.max.ms\); txkafka never creates"):
        p.send("t", _values(0, 10), partitions=_to(0, 10))
        p.flush()
    p.close()
    assert len(cluster.add_partitions_answers) < 999  # asked again
    assert time.monotonic() - started >= 2 - 0.2  # virtual seconds: patience less a back-off


@pytest.mark.parametrize("reached", [True, False], ids=["added", "never-arrived"])
def test_an_abort_after_an_unanswered_add_partitions_ends_the_transaction(
        reached, virtual_clock, caplog):
    """AddPartitionsToTxn's answer is lost each time (the connection drops) until the producer's
    budget ends, and the task aborts. The coordinator may have added the partitions (the
    transaction is then open, holding back read_committed readers): EndTxn(abort) goes out.
    (abort() sent nothing, as no partition was known to be added: the transaction stayed open
    until the committer's sweep or its timeout.) If the request never arrived, the coordinator
    answers the abort INVALID_TXN_STATE (nothing started), which is no failure: not logged."""
    cluster = SimCluster(random.Random(1), Faults(), topics={"t": 3})
    cluster.add_partitions_lost = [reached] * 10_000
    p = _producer(cluster)
    with pytest.raises(TransactionError, match="AddPartitionsToTxn answered"):
        p.send("t", _values(0, 10), partitions=_to(0, 10))
        p.flush()
    assert len(cluster.add_partitions_lost) < 10_000 - 1  # asked again until the budget's end
    assert cluster.in_txn == ({("t", 0)} if reached else set())
    with caplog.at_level("DEBUG", logger="txkafka.writer"):
        p.abort()
    p.close()
    assert cluster.end_txn_calls == [(False, 0)]
    assert cluster.in_txn == set()
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text


def test_a_task_that_never_added_a_partition_sends_no_end_txn():
    """Nothing was written, so no AddPartitionsToTxn went out: abort() has nothing to end."""
    cluster = SimCluster(random.Random(1), Faults(), topics={"t": 3})
    p = _producer(cluster)
    p.abort()
    p.close()
    assert cluster.end_txn_calls == []


def test_a_metadata_request_that_only_waited_for_the_shared_connection_leaves_it_open(
        brokers):  # noqa: F811
    """Another thread's slow request (an InitProducerId at a busy coordinator) holds the link's
    connection to a broker past a Metadata attempt's deadline: that attempt fails, and the
    connection stays open, shared, its broker not counted as failed. (The failed attempt closed
    it once the slow request was answered: the next request paid a new connection and login, and
    the broker was asked last.)"""
    b = brokers()
    b.handlers[METADATA] = lambda n, body: _topic_answer(b.port, leader=1)
    release = threading.Event()

    def slow_producer_id(n: int, body: Reader) -> bytes:
        release.wait(10)
        return _producer_id(n, body)

    b.handlers[INIT_PRODUCER_ID] = slow_producer_id
    link = ClusterLink({"bootstrap.servers": f"127.0.0.1:{b.port}"})
    conn = link.connection("127.0.0.1", b.port)
    answered: list[object] = []
    body = Writer(True).string("tid").int32(60000).int64(-1).int16(-1).tags().build()
    slow = threading.Thread(target=lambda: answered.append(conn.request(
        INIT_PRODUCER_ID, 4, body, flexible=True, deadline=time.monotonic() + 10)))
    slow.start()
    try:
        waiting_until = time.monotonic() + 10
        while not any(key == INIT_PRODUCER_ID for _, key, _ in b.log):
            assert time.monotonic() < waiting_until, "the slow request never reached the broker"
            time.sleep(0.01)
        with pytest.raises(BrokersUnavailableError, match="timed out waiting for the connection"):
            link.topic("t", timeout_s=0.3)
    finally:
        release.set()
        slow.join(10)
    try:
        assert answered and not conn.closed and link._failed == {}
        assert link.topic("t").leaders == {0: 1}
        assert link.connection("127.0.0.1", b.port) is conn
    finally:
        link.close()


def _busy_sasl_producer(b, produce_s: float) -> list[int]:
    """3000 records to ``b`` (a SASL fake broker) through one busy sender: every batch is queued
    before the first answer, and each Produce takes the broker ``produce_s`` (on the virtual
    clock). Returns the connection number of each Produce request."""
    b.handlers[METADATA] = lambda n, body: _topic_answer(b.port, leader=1)
    b.handlers[INIT_PRODUCER_ID] = _producer_id
    queued = threading.Event()  # every batch queued before the first answer: a busy sender

    def produce(n: int, body: Reader) -> bytes:
        queued.wait(10)
        time.sleep(produce_s)
        return _produce_ok(n, body)

    b.handlers[PRODUCE] = produce
    conf = {"bootstrap.servers": f"127.0.0.1:{b.port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "pw",
            "batch.size": "200"}
    link = ClusterLink(conf)
    p = WireProducer(conf, link=link, where="test task")
    try:
        p.begin()
        p.send("t", _values(0, 3000), partitions=_to(0, 3000))
        queued.set()
        assert p.flush().record_count == 3000
    finally:
        queued.set()
        p.close()
        link.close()
    return [n for n, key, _ in b.log if key == PRODUCE]


def test_a_busy_produce_connection_logs_in_again_before_its_session_ends(
        brokers, virtual_clock):  # noqa: F811
    """A broker with connections.max.reauth.ms (KIP-368; 5 s here) closes a connection at the
    first request after its session ended, losing the answers in flight. A sender that always
    has requests in flight stops sending once its login nears the end, reads the answers, logs
    in again and goes on. (Only an idle connection renewed its login: a busy one reached the
    end, and its requests went again.) Virtual time: each Produce takes the broker 50 ms, so the
    real time a loaded machine adds is small beside the session's end margin."""
    b = brokers(sasl_password="pw", session_ms=5000, offered=PRODUCER_OFFERED)
    produced = _busy_sasl_producer(b, 0.05)
    assert len(produced) * 0.05 > 2 * 5  # the sender was busy for more than two sessions
    assert b.expired == []
    assert len(set(produced)) >= 3  # logged in again on a new connection each session


def test_a_slow_login_leaves_a_busy_sender_its_whole_session(brokers, virtual_clock):  # noqa: F811
    """The broker starts a login's session once it has checked the last SaslAuthenticate: the
    time the login's other round trips took (ApiVersions here, 4.5 s of a 5 s session: a loaded
    machine, a slow token endpoint) is not spent of it, and the sender pipelines on that login
    until its renewal point. (The session counted from the TCP connect: such a login was due
    for renewal at once, so the sender logged in again before every request; on a loaded
    machine 3000 records then missed the 300 s delivery timeout.)"""
    b = brokers(sasl_password="pw", session_ms=5000, api_versions_delay=4.5,
                offered=PRODUCER_OFFERED)
    produced = _busy_sasl_producer(b, 0.005)  # all of them within one session's 4.25 s
    assert len(produced) >= 50 * len(set(produced))  # not a login per request
    assert b.expired == []


def test_a_partition_added_since_the_metadata_was_read_is_written_not_refused():
    """Partitions added to the output topic while the stream runs: the worker's link still has
    the old count (Metadata is kept for a minute), and a row whose 'partition' names a new
    partition is checked against fresh Metadata before it is refused. (It failed the task, and
    every retry on that worker, with "topic 't' has 2 partitions".)"""
    cluster = SimCluster(random.Random(1), Faults(), topics={"t": 2})
    link = SimLink(cluster)
    first = WireProducer({"bootstrap.servers": "sim:9092"}, transactional_id="sim-0", link=link)
    first.begin()
    first.send("t", _values(0, 10), partitions=_to(1, 10))
    first.flush()
    first.close()
    cluster.end_txn(commit=True)
    with cluster.lock:  # kafka-topics --alter --partitions 4
        cluster.topics["t"] = 4
        for p in (2, 3):
            cluster.leaders[("t", p)] = cluster.nodes[p % len(cluster.nodes)]
            cluster.logs[("t", p)] = []
    second = WireProducer({"bootstrap.servers": "sim:9092"}, transactional_id="sim-0", link=link)
    second.begin()
    second.send("t", _values(10, 10), partitions=_to(3, 10))
    with pytest.raises(KafkaConfigError, match="'partition' column is 9, but topic 't' has 4"):
        second.send("t", _values(20, 1), partitions=_to(9, 1))
    assert second.flush().topic_partitions == {"t": [3]}
    second.close()
    assert cluster.written(("t", 3)) == _values(10, 10).to_pylist()


def test_an_output_topic_deleted_mid_task_fails_it_saying_so():
    """The output topic deleted while a task writes: Produce answers UNKNOWN_TOPIC_OR_PARTITION
    and Metadata no longer knows the topic. Once that lasts kafka.topic.metadata.propagation.max.ms
    the task fails naming the missing topic (it retried until the delivery timeout, then said
    "check the brokers' health"); the driver commits nothing of it."""
    cluster = SimCluster(random.Random(1), Faults(), topics={"t": 2})
    link = SimLink(cluster)
    link.conf["topic.metadata.propagation.max.ms"] = "300"
    p = WireProducer({"bootstrap.servers": "sim:9092", "message.timeout.ms": "5000"},
                     transactional_id="sim-0", link=link, where="test task")
    p.begin()
    p.send("t", _values(0, 50), partitions=_to(0, 50))
    with cluster.lock:
        del cluster.topics["t"]  # kafka-topics --delete
    p.send("t", _values(50, 50), partitions=_to(0, 50))
    with pytest.raises(TransactionError, match=r"topic 't' does not exist \(UNKNOWN_TOPIC_OR_"):
        p.flush()
    p.abort()
    p.close()
