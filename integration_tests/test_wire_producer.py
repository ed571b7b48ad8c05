"""txkafka's own producer against a real Apache Kafka: what it writes, librdkafka's consumer reads
back identically; its transactions are committed by the existing committer (EndTxn from another
connection) on transaction.version 2 and 0 brokers, aborted ones stay invisible to read_committed;
sequences survive retries without duplicates; failures are typed."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from integration_tests.conftest import native_kafka
from integration_tests.kafka_helpers import KafkaTarget, unique
from txkafka.connector.client import producer as wire_producer
from txkafka.connector.errors import KafkaProtocolError, TransactionError
from txkafka.connector.sink.committable import KafkaCommittable, TaskResult
from txkafka.connector.sink.committer import KafkaCommitter
from txkafka.connector.client.record_batch_decoder import HEADERS_TYPE
from txkafka.connector.client.record_batch_encoder import RecordTooLargeError
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.client.transactions import TransactionClient
from txkafka.connector.sink.transactional_ids import TransactionalIdFactory
from txkafka.connector.client.fetcher import WireRange, read_range
from txkafka.connector.client.producer import ClusterLink, WireProducer
from txkafka.embedded_kafka import EmbeddedKafka

pytestmark = [pytest.mark.kafka]

# Recent: the embedded broker's retention check (every 2 s, 7 days) would delete older records.
TS = int(time.time()) * 1000 - 60_000


@pytest.fixture(scope="module")
def kafka_tv0(tmp_path_factory) -> KafkaTarget:
    """A single node formatted with transaction.version=0 (the pre-KIP-890 protocol)."""
    cluster = EmbeddedKafka("pytest-wire-tv0", 1, root=tmp_path_factory.mktemp("kafka-wire-tv0"),
                            transaction_version=0)
    yield from native_kafka(cluster, "the transaction.version=0 broker", timeout=240)


def _rows(n: int, start: int = 0) -> tuple[pa.Array, pa.Array]:
    keys = pa.array([f"key-{i}" for i in range(start, start + n)], pa.string())
    values = pa.array([b"value-%d" % i for i in range(start, start + n)], pa.binary())
    return keys, values


def _write(conf: dict, topic: str, tid: str | None, chunks: list[dict], **kw) -> WireProducer:
    p = WireProducer(conf, transactional_id=tid, where="test task", **kw)
    p.begin()
    for c in chunks:
        p.send(topic, **c)
    return p


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_reads_back_what_it_wrote(kafka, codec):
    topic = kafka.create_topic(partitions=5)
    n = 3000
    keys = pa.array([f"k{i}" if i % 10 else None for i in range(n)], pa.string())
    values = pa.array([b"v%d" % i * (i % 50) if i % 17 else None for i in range(n)], pa.binary())
    headers = pa.array([[{"key": "h", "value": b"%d" % i}, {"key": "n", "value": None}]
                        if i % 4 else None for i in range(n)], HEADERS_TYPE)
    explicit = pa.array([i % 5 if i % 7 == 0 else None for i in range(n)], pa.int32())
    chunks = [dict(values=values.slice(s, 1000), keys=keys.slice(s, 1000),
                   headers=headers.slice(s, 1000), partitions=explicit.slice(s, 1000),
                   timestamp_ms=TS + s) for s in range(0, n, 1000)]
    p = _write({**kafka.conf, "compression.type": codec}, topic, unique("wire-read"), chunks)
    res = p.flush()
    p.close()
    assert res.record_count == n
    with TransactionClient(kafka.conf) as tc:
        assert tc.end_txn(res.transactional_id, res.producer_id, res.producer_epoch, True) == 0
    got = kafka.read_committed_count(topic, n)
    # Where librdkafka's murmur2_random producer puts the same keys (null keys: anywhere).
    twin = kafka.create_topic(partitions=5)
    kafka.produce(twin, [(k, b"x") for k in keys.to_pylist() if k is not None])
    placed = {r.key: r.partition for r in kafka.read_all(twin)}
    expected = {}
    for i in range(n):
        expected[(b"v%d" % i * (i % 50) if i % 17 else None, i)] = i
    by_value_ts = {}
    for r in got:
        by_value_ts.setdefault((r.value, r.timestamp), []).append(r)
    for i in range(n):
        k = keys[i].as_py()
        v = values[i].as_py()
        (r,) = [x for x in by_value_ts[(v, TS + (i // 1000) * 1000)]
                if x.key == (k.encode() if k is not None else None)
                and (k is not None or x.headers == _headers_of(headers, i))][:1]
        assert r.headers == _headers_of(headers, i)
        if explicit[i].as_py() is not None:
            assert r.partition == explicit[i].as_py()
        elif k is not None:
            assert r.partition == placed[k.encode()]
    # Within a partition, records keep the order they were given in.
    for part in range(5):
        ts_order = [(r.timestamp, r.offset) for r in got if r.partition == part]
        assert ts_order == sorted(ts_order)


def _headers_of(headers: pa.Array, i: int) -> tuple:
    row = headers[i].as_py()
    return tuple((h["key"], h["value"]) for h in row) if row else ()


def _committer(kafka: KafkaTarget, tmp_path, topic: str):
    cfg = SinkConfig.from_options({"kafka.bootstrap.servers": kafka.bootstrap, "topic": topic,
                                   "checkpointLocation": str(tmp_path)}, streaming=True)
    log = SinkCommitLog(str(tmp_path))
    ids = TransactionalIdFactory(cfg.transactional_id_prefix, log.identity("x").sink_id)
    return cfg, log, ids, KafkaCommitter(cfg, ids, log)


def _task(cfg, ids, batch_id: int, part: int, n: int, start: int, attempt: int = 0
          ) -> TaskResult:
    keys, values = _rows(n, start)
    tid = ids.transactional_id(part, attempt)
    p = _write(cfg.kafka, cfg.topic, tid, [dict(values=values, keys=keys)],
               transaction_timeout_ms=cfg.transaction_timeout_ms)
    res = p.flush()
    p.close()
    c = KafkaCommittable(transactional_id=tid, producer_id=res.producer_id,
                         producer_epoch=res.producer_epoch, partition_id=part, attempt=attempt,
                         batch_id=batch_id, record_count=res.record_count,
                         topic_partitions=res.topic_partitions)
    return TaskResult(part, attempt, batch_id, c, res.record_count)


@pytest.mark.parametrize("broker", ["kafka", "kafka_tv0"])
def test_the_committer_commits_what_tasks_precommitted(broker, request, tmp_path):
    kafka = request.getfixturevalue(broker)
    topic = kafka.create_topic(partitions=3)
    cfg, log, ids, committer = _committer(kafka, tmp_path, topic)
    r0 = _task(cfg, ids, 0, 0, 500, 0)
    r1 = _task(cfg, ids, 0, 1, 300, 500)
    assert kafka.read_all(topic) == []  # pre-committed: open, invisible to read_committed
    assert len(kafka.read_all(topic, isolation="read_uncommitted")) == 800
    with TransactionClient(kafka.conf) as tc:
        d = tc.describe([r0.committable.transactional_id])[r0.committable.transactional_id]
    assert d.state == "Ongoing" and {t: sorted(ps) for t, ps in d.partitions.items()} == {
        topic: [0, 1, 2]} == r0.committable.topic_partitions
    assert (d.producer_id, d.producer_epoch) == (r0.committable.producer_id,
                                                  r0.committable.producer_epoch)
    report = committer.commit(0, [r0, r1])
    assert report.transactions == 2 and report.records == 800
    assert sorted(r.value for r in kafka.read_all(topic)) == sorted(_rows(800)[1].to_pylist())
    # The next batch reuses the ids (new epochs), on the same kept connections.
    r2 = _task(cfg, ids, 1, 0, 100, 800)
    assert r2.committable.producer_id == r0.committable.producer_id
    assert r2.committable.producer_epoch > r0.committable.producer_epoch
    committer.commit(1, [r2])
    assert sorted(r.value for r in kafka.read_all(topic)) == sorted(_rows(900)[1].to_pylist())
    assert kafka.open_transactions(ids.sink_prefix) == []


def test_an_aborted_transaction_stays_invisible(kafka):
    topic = kafka.create_topic(partitions=2)
    keys, values = _rows(400)
    tid = unique("wire-abort")
    p = _write(kafka.conf, topic, tid, [dict(values=values, keys=keys)])
    p.flush()
    p.abort()
    p.close()
    assert len(kafka.read_all(topic, isolation="read_uncommitted")) == 400
    assert kafka.read_all(topic) == []
    assert kafka.open_transactions(tid) == []


def test_lost_answers_are_resent_with_the_same_sequences_and_written_once(kafka, monkeypatch):
    """The broker appends a request's batches but the answer never arrives (the connection
    drops): the producer sends every unacknowledged batch again with its sequence number, and
    the broker's duplicate check keeps each record once, in order."""
    topic = kafka.create_topic(partitions=3)
    link = ClusterLink(kafka.conf)
    lost = {"left": 3}
    real = wire_producer.BrokerConnection.receive_pipelined

    def drop_answers(self, cid, api_key, **kw):
        answer = real(self, cid, api_key, **kw)
        if api_key == wire_producer.PRODUCE and lost["left"] > 0:
            lost["left"] -= 1
            raise KafkaProtocolError("connection reset by the test after the broker appended")
        return answer

    monkeypatch.setattr(wire_producer.BrokerConnection, "receive_pipelined", drop_answers)
    n = 30_000
    keys, values = _rows(n)
    chunks = [dict(values=values.slice(s, 2000), keys=keys.slice(s, 2000))
              for s in range(0, n, 2000)]
    p = _write({**kafka.conf, "batch.size": "20000"}, topic, unique("wire-retry"), chunks,
               link=link)
    res = p.flush()
    p.close()
    assert lost["left"] == 0
    with TransactionClient(kafka.conf) as tc:
        assert tc.end_txn(res.transactional_id, res.producer_id, res.producer_epoch, True) == 0
    got = kafka.read_all(topic)
    assert len(got) == n and len({r.value for r in got}) == n
    for part in range(3):
        idx = [int(r.key[4:]) for r in got if r.partition == part]
        assert idx == sorted(idx)
    link.close()


def test_idempotent_producers_share_a_producer_id_across_tasks(kafka):
    topic = kafka.create_topic(partitions=2)
    link = ClusterLink(kafka.conf)
    ids = []
    for t in range(3):
        keys, values = _rows(1000, t * 1000)
        p = _write(kafka.conf, topic, None, [dict(values=values, keys=keys)], link=link)
        res = p.flush()
        p.close()
        ids.append((res.producer_id, res.producer_epoch))
    assert len(set(ids)) == 1  # sequences continue on the kept producer id
    got = kafka.read_all(topic, isolation="read_uncommitted")
    assert sorted(r.value for r in got) == sorted(_rows(3000)[1].to_pylist())
    link.close()


def test_a_fenced_producer_fails_typed(kafka):
    topic = kafka.create_topic()
    tid = unique("wire-fence")
    keys, values = _rows(10)
    old = _write(kafka.conf, topic, tid, [])
    newer = _write(kafka.conf, topic, tid, [dict(values=values, keys=keys)])
    with pytest.raises(TransactionError, match="fenced"):
        old.send(topic, values, keys=keys)
        old.flush()
    old.close()
    newer.abort()
    newer.close()


def test_missing_topic_and_oversized_records_fail_typed(kafka):
    with pytest.raises(TransactionError, match="does not exist"):
        _write({**kafka.conf, "topic.metadata.propagation.max.ms": "1000"},
               unique("no-such-topic"), unique("wire-err"), [dict(values=pa.array([b"x"]))])
    small = kafka.create_topic(config={"max.message.bytes": "2000"})
    p = _write(kafka.conf, small, unique("wire-big"), [dict(values=pa.array([b"x" * 5000]))])
    with pytest.raises(TransactionError, match="max.message.bytes"):
        p.flush()
    p.abort()
    p.close()
    with pytest.raises(RecordTooLargeError, match="kafka.message.max.bytes"):
        _write({**kafka.conf, "message.max.bytes": "10000"}, small, unique("wire-big"),
               [dict(values=pa.array([b"x" * 20_000]))])


def test_a_record_timestamp_the_broker_refuses_names_the_clocks(kafka):
    """A record stamped by an executor clock 2 h ahead of the broker's: the topic's
    message.timestamp.after.max.ms (1 h, Kafka 4's default, set here for any version) refuses it
    with INVALID_TIMESTAMP, which librdkafka reports as code 32 (what the librdkafka task writer
    maps) and txkafka's producer turns into a TransactionError naming the clocks."""
    topic = kafka.create_topic(config={"message.timestamp.after.max.ms": "3600000"})
    ahead_ms = int(time.time() * 1000) + 2 * 3600_000
    failed = []
    p = kafka.producer(**{"on_delivery": lambda err, msg: failed.append(err)})
    p.produce(topic, b"x", timestamp=ahead_ms)
    p.flush(30)
    assert [e.code() for e in failed] == [32]
    w = _write(kafka.conf, topic, unique("wire-ts"),
               [dict(values=pa.array([b"a", b"b"]), timestamp_ms=ahead_ms)])
    with pytest.raises(TransactionError, match=r"2 record\(s\): the broker refused the records' "
                       r"timestamps \(INVALID_TIMESTAMP\).*clock of the executor"):
        w.flush()
    w.abort()
    w.close()


def test_quotas_slow_txkafka_s_client_down_without_failing_or_handing_over(kafka):
    """A broker enforcing quotas (KIP-13 byte rates) answers at once with throttle_time_ms and
    then reads nothing more from that connection for that long (KIP-219): txkafka's producer and
    fetch wait it out. Written under a producer_byte_rate, committed, read back under a
    consumer_byte_rate by txkafka's fetch: every record once, in order, and no range handed to
    librdkafka (a throttled Fetch is answered with no partitions at all, which the fetch took for
    "no records where the range expects them")."""
    topic = kafka.create_topic(partitions=1)
    client = unique("quota")
    # A broker's rate counts over at least 10 s: a client is throttled once it moved more than
    # 10 s of its quota, here after about 300 KB, for about as long as the rest takes at the rate.
    kafka.set_client_quota(client, producer_byte_rate=30_000, consumer_byte_rate=30_000)
    conf = {**kafka.conf, "client.id": client, "batch.size": str(32 << 10)}
    n = 400
    values = pa.array([b"%06d" % i + b"x" * 994 for i in range(n)], pa.binary())
    p = _write(conf, topic, unique("quota-tx"), [{"values": values.slice(s, 50)}
                                                  for s in range(0, n, 50)])
    done = p.flush()
    p.close()
    with TransactionClient(kafka.conf) as tc:
        assert tc.end_txn(done.transactional_id, done.producer_id, done.producer_epoch,
                          commit=True) == 0
    assert [r.value for r in kafka.read_committed_count(topic, n)] == values.to_pylist()
    wr = WireRange(topic, 0, 0, n, (("bootstrap.servers", kafka.bootstrap), ("client.id", client),
                                    ("max.partition.fetch.bytes", str(64 << 10))))
    read = [v for d in read_range(wr) for v in d.values.to_pylist()]
    assert (wr.handoff, wr.handoff_reason) == (None, "")
    assert read == values.to_pylist()
