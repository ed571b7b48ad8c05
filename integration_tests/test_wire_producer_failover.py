"""txkafka's own producer (the sink's default) through broker faults on a real 3-node cluster
(replication factor 3, min.insync.replicas 2): the leader of a written partition SIGKILLed
mid-transaction (directly and under a Spark write), the leader SIGSTOPped past the request
timeout, min.insync.replicas unmet and restored before the delivery limit, or not. Each ends with
every record exactly once and in order (read_committed), or in a typed failure with nothing of
the transaction visible; no transaction is left open, at its coordinator (ListTransactions) or at
a partition's leader (DescribeProducers). And a metadata refresh while two brokers are frozen is
answered by the third."""

from __future__ import annotations

import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from integration_tests.kafka_helpers import KafkaTarget, unique
from integration_tests.pipeline_helpers import wait_until
from txkafka.connector.client import connection as broker_connection
from txkafka.connector.client.connection import BrokerConnection, SecurityConfig
from txkafka.connector.errors import TransactionError
from txkafka.connector.client.protocol import Writer
from txkafka.connector.client.transactions import TransactionClient
from txkafka.connector.client.producer import ClusterLink, WireProducer

pytestmark = [pytest.mark.kafka, pytest.mark.cluster3]

RETRIED = "will be retried"


def _rows(start: int, n: int) -> tuple[pa.Array, pa.Array]:
    keys = pa.array([b"k%d" % (i % 997) for i in range(start, start + n)], pa.binary())
    values = pa.array([b"%09d" % i for i in range(start, start + n)], pa.binary())
    return keys, values


def _leader(kafka: KafkaTarget, topic: str, partition: int) -> int:
    return kafka.admin().list_topics(topic, timeout=30).topics[topic].partitions[partition].leader


def _full_isr(kafka: KafkaTarget, topics: list[str]) -> bool:
    md = kafka.admin().list_topics(timeout=30)
    return all(len(p.isrs) == 3 for t in topics for p in md.topics[t].partitions.values())


def _heal(kafka: KafkaTarget, topics: list[str]) -> None:
    """Every node up again and back in every replica set (the next test needs all three)."""
    cluster = kafka.cluster
    for node in cluster.node_infos:
        if node.node_id not in cluster.alive_nodes():
            cluster.start_node(node.node_id)
    wait_until(lambda: _full_isr(kafka, topics + ["__transaction_state"]), 120,
               "every replica back in sync")


def _producer(kafka: KafkaTarget, tid: str, **conf: str) -> WireProducer:
    full = {**kafka.conf, "batch.size": "16384", **conf}
    p = WireProducer(full, transactional_id=tid, link=ClusterLink(full), where="failover test")
    p.begin()
    return p


def _commit(kafka: KafkaTarget, p: WireProducer) -> None:
    res = p.flush()
    p.close()
    with TransactionClient(kafka.conf, timeout=60) as tc:
        assert tc.end_txn(res.transactional_id, res.producer_id, res.producer_epoch, True) == 0


def _exactly_once(kafka: KafkaTarget, topic: str, expected: range, ordered: bool = True) -> None:
    """Every id once (read_committed); ``ordered``: each partition's ids in the order sent (one
    writer per partition)."""
    got = kafka.read_committed_count(topic, len(expected), timeout=90)
    ids = [int(r.value) for r in got]
    assert len(set(ids)) == len(ids), "duplicates"
    assert sorted(ids) == list(expected), "gaps"
    for part in {r.partition for r in got} if ordered else ():
        mine = [int(r.value) for r in got if r.partition == part]
        assert mine == sorted(mine), f"partition {part} out of order"


DESCRIBE_PRODUCERS = 61


def _hanging(kafka: KafkaTarget, topic: str) -> list[tuple[int, int]]:
    """(partition, producer id) of every transaction a partition's leader still holds open
    (DescribeProducers: CurrentTxnStartOffset set), whatever the coordinator says: what a
    Produce handled after its transaction's markers leaves behind (a hanging transaction)."""
    md = kafka.admin().list_topics(topic, timeout=30)
    open_txns = []
    for part, pm in sorted(md.topics[topic].partitions.items()):
        broker = md.brokers[pm.leader]
        conn = BrokerConnection(broker.host, broker.port, SecurityConfig())
        try:
            body = (Writer(True).array([(topic, [part])], lambda w, tp: w.string(tp[0]).array(
                tp[1], lambda ww, p: ww.int32(p)).tags()).tags().build())
            r = conn.request(DESCRIBE_PRODUCERS, 0, body, flexible=True)
            r.int32()
            for _ in range(r.uvarint() - 1):
                r.string()
                for _ in range(r.uvarint() - 1):
                    index, err = r.int32(), r.int16()
                    r.string()
                    assert err == 0, f"DescribeProducers {topic}[{index}]: error {err}"
                    for _ in range(r.uvarint() - 1):
                        pid = r.int64()
                        r.int32(), r.int32(), r.int64(), r.int32()
                        if r.int64() >= 0:
                            open_txns.append((index, pid))
                        r.tags()
                    r.tags()
                r.tags()
        finally:
            conn.close()
    return open_txns


def _retried(caplog, what: str) -> bool:
    return any(RETRIED in r.getMessage() and what in r.getMessage() for r in caplog.records)


def _until_answered(p: WireProducer, topic: str, answer: str, caplog, timeout: float) -> None:
    """Wait until the producer's last retriable answer for ``topic``[0] is ``answer`` (its own
    state, set as the answer is read); a timeout says what the partition's state was."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        part = p._parts.get((topic, 0))
        if part is not None and part.last_answer == answer:
            return
        time.sleep(0.1)
    part = p._parts.get((topic, 0))
    state = (None if part is None else
             dict(leader=part.leader, inflight=part.inflight, retry=part.retry,
                  queued=len(part.queue), last_answer=part.last_answer))
    pytest.fail(f"no {answer} answer within {timeout:g}s; {topic}[0]: {state}; "
                f"{sum(RETRIED in r.getMessage() for r in caplog.records)} retry log lines")


def test_leader_sigkilled_mid_transaction_then_sigstopped_past_the_request_timeout(kafka3,
                                                                                   caplog):
    """Two faults in one transaction: the leader of partition 0 is SIGKILLed between sends
    (Produce requests in flight are cut: resent to the new leader, whose producer state finds
    the duplicates); later the new leader of partition 1 is SIGSTOPped for longer than
    request.timeout.ms (no answer at all: the producer gives up on the connection at the
    request's deadline, the controller moves the leadership, the batches go again)."""
    caplog.set_level(logging.INFO, logger="txkafka.writer")
    topic = kafka3.create_topic(partitions=3)
    cluster = kafka3.cluster
    tid = unique("wire-failover")
    p = _producer(kafka3, tid, **{"request.timeout.ms": "4000"})
    n, chunk = 80_000, 4_000
    stopped: list[int] = []
    killed = -1
    try:
        for i, start in enumerate(range(0, n, chunk)):
            p.send(topic, _rows(start, chunk)[1], keys=_rows(start, chunk)[0])
            if i == 4:
                killed = _leader(kafka3, topic, 0)
                assert p._parts[(topic, 0)].leader == killed, p._parts[(topic, 0)]  # writes there
                cluster.kill_node(killed, signal.SIGKILL)
            if i == 10:
                victim = _leader(kafka3, topic, 1)
                cluster.pause_node(victim)
                stopped.append(victim)
                threading.Timer(12.0, cluster.resume_node, (victim,)).start()
        _commit(kafka3, p)
        assert _retried(caplog, "did not answer"), "no request outlived its timeout"
        # Partition 0's later batches went on only after its sends to the dead node failed and
        # a retry round asked Metadata for its new leader (the node stays down until _heal).
        assert p._parts[(topic, 0)].leader != killed, "the kill never reached the producer"
        _exactly_once(kafka3, topic, range(n))
        assert kafka3.open_transactions(tid) == [] and _hanging(kafka3, topic) == []
    finally:
        for node in stopped:
            cluster.resume_node(node)
        _heal(kafka3, [topic])


def _isr(kafka: KafkaTarget, topic: str) -> int:
    return len(kafka.admin().list_topics(topic, timeout=30).topics[topic].partitions[0].isrs)


def test_min_insync_replicas_unmet_then_restored_in_time_or_not(kafka3, caplog):
    """A topic of min.insync.replicas 3 loses a follower (SIGSTOPped, fenced, out of the ISR):
    its leader answers NOT_ENOUGH_REPLICAS. A transaction whose follower comes back before
    message.timeout.ms delivers everything once; one whose follower does not fails typed, is
    aborted, and shows nothing."""
    caplog.set_level(logging.INFO, logger="txkafka.writer")
    cluster = kafka3.cluster
    topic = kafka3.create_topic(partitions=1, config={"min.insync.replicas": "3"})
    meta = kafka3.admin().list_topics(topic, timeout=30).topics[topic].partitions[0]
    follower = next(r for r in meta.replicas if r != meta.leader)
    first = _producer(kafka3, unique("wire-isr-ok"), **{"message.timeout.ms": "90000"})
    first.send(topic, _rows(0, 5000)[1], keys=_rows(0, 5000)[0])
    first.flush()
    assert _hanging(kafka3, topic) == [(0, first.producer_id)]  # open: the check sees it
    tid = unique("wire-isr-lost")
    lost = _producer(kafka3, tid, **{"message.timeout.ms": "8000"})
    try:
        cluster.pause_node(follower)
        wait_until(lambda: _isr(kafka3, topic) < 3, 60, "the stopped follower out of the ISR")
        first.send(topic, _rows(5000, 5000)[1], keys=_rows(5000, 5000)[0])
        with ThreadPoolExecutor(1) as pool:
            done = pool.submit(_commit, kafka3, first)
            _until_answered(first, topic, "NOT_ENOUGH_REPLICAS", caplog, 60)
            cluster.resume_node(follower)
            done.result(120)
        assert _retried(caplog, "NOT_ENOUGH_REPLICAS")  # and the log says so

        cluster.pause_node(follower)
        wait_until(lambda: _isr(kafka3, topic) < 3, 60, "the stopped follower out of the ISR")
        lost.send(topic, _rows(10_000, 3000)[1], keys=_rows(10_000, 3000)[0])
        # The leader's answer first (the send queued full batches: their senders are at work),
        # then the flush: its backstop, which names the last answer seen, cannot fire before a
        # leader slow under load answered. Its failure (the retry round's, or the backstop's)
        # names that answer.
        _until_answered(lost, topic, "NOT_ENOUGH_REPLICAS", caplog, 60)
        with pytest.raises(TransactionError,
                           match="not (delivered|acknowledged) within 8s.*NOT_ENOUGH_REPLICAS"):
            lost.flush()
        lost.abort()
        lost.close()
    finally:
        cluster.resume_node(follower)
    _exactly_once(kafka3, topic, range(10_000))
    assert kafka3.open_transactions(tid) == [] and _hanging(kafka3, topic) == []
    _heal(kafka3, [topic])


def test_a_metadata_refresh_is_answered_by_the_third_broker_when_two_freeze(kafka3, monkeypatch):
    """The link has a connection open to each broker; the two it asks first freeze (SIGSTOP):
    Metadata goes unanswered at the first until the connection's per-read cap (made short here,
    below the brokers' session timeout), then at the second, and the third answers. (The link
    asked again only once, at the next connected broker: the refresh failed.)"""
    monkeypatch.setattr(broker_connection, "ATTEMPT_TIMEOUT_S", 1.5)
    cluster = kafka3.cluster
    topic = kafka3.create_topic(partitions=2)
    link = ClusterLink(kafka3.conf)
    frozen: list[int] = []
    try:
        link.topic(topic)
        nodes = {addr: node for node, addr in link.brokers.items()}
        for addr in nodes:
            link.connection(*addr)
        for addr in link._brokers_to_ask()[:2]:
            cluster.pause_node(nodes[addr])
            frozen.append(nodes[addr])
        info = link.topic(topic, refresh=True)
        assert info.partitions == 2 and sorted(info.leaders) == [0, 1]
    finally:
        for node in frozen:
            cluster.resume_node(node)
        link.close()
    _heal(kafka3, [topic])


@pytest.mark.spark
def test_a_spark_write_survives_its_leader_sigkilled(spark, kafka3):
    """A df.write with the default producer, the leader of a written partition SIGKILLed once
    the write has records in the log: the write succeeds, every row once."""
    topic = kafka3.create_topic(partitions=3)
    prefix = unique("wire-spark-kill")
    n = 400_000
    df = spark.range(n).selectExpr("CAST(id % 1000 AS STRING) AS key",
                                   "lpad(CAST(id AS STRING), 9, '0') AS value").repartition(2)
    victim = _leader(kafka3, topic, 0)
    killed = threading.Event()

    def kill_when_writing() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if sum(kafka3.end_offsets(topic).values()) > 0:
                kafka3.cluster.kill_node(victim, signal.SIGKILL)
                killed.set()
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_writing, daemon=True)
    killer.start()
    try:
        # A transaction timeout above the default 60 s: on a loaded machine the write and the
        # leader's failover may outlast it, and the coordinator's abort (a loud, correct failure
        # of the write) is not what this test is about.
        df.write.format("txkafka").option("kafka.bootstrap.servers", kafka3.bootstrap) \
            .option("topic", topic).option("transactionalIdPrefix", prefix) \
            .option("kafka.transaction.timeout.ms", "300000").mode("append").save()
        killer.join(10)
        assert killed.is_set(), "the write finished before the kill"
        _exactly_once(kafka3, topic, range(n), ordered=False)  # two tasks share partitions
        assert kafka3.open_transactions(f"{prefix}-") == [] and _hanging(kafka3, topic) == []
    finally:
        killer.join(10)
        _heal(kafka3, [topic])
