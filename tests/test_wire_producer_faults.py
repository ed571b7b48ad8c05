"""txkafka's producer at the request level, one defect per test, against the simulated cluster
(tests/produce_sim.py) with its real sender threads: no empty Produce request; the partition map
changed only under the lock; no EndTxn while a Produce request is in flight; at_least_once's
delivery limit counted per batch; a pipelined answer waits for the request's own timeout, not the
connection's per-read cap."""

from __future__ import annotations

import random
import time

import pyarrow as pa
import pytest

from tests.produce_sim import Faults, SimCluster, SimLink, StepRunner, VirtualClock
from tests.test_coordinator_client_failures import END_TXN, brokers  # noqa: F401 (fixture)
from txkafka.connector.client.connection import BrokerConnection, SecurityConfig
from txkafka.connector.errors import KafkaAuthorizationError
from txkafka.connector.client.protocol import Writer
from txkafka.connector.client.producer import WireProducer


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
    p.send("t", _values(2050, 10), partitions=_to(0, 10))
    with pytest.raises(KafkaAuthorizationError, match="TOPIC_AUTHORIZATION_FAILED"):
        p.flush()
    p.abort()
    p.close()
    assert cluster.end_txn_calls == [(False, 0)], cluster.violations


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
        time.sleep(0.8)
        return Writer(True).int32(0).int16(0).tags().build()

    broker.handlers[END_TXN] = slow_end_txn
    conn = BrokerConnection("127.0.0.1", broker.port, SecurityConfig(), timeout=0.2)
    body = Writer(True).string("t").int64(7).int16(0).boolean(False).tags().build()
    cid = conn.send_pipelined(END_TXN, 3, body, flexible=True)
    r = conn.receive_pipelined(cid, END_TXN, flexible=True, deadline=time.monotonic() + 10)
    r.int32()
    assert r.int16() == 0
    conn.close()
