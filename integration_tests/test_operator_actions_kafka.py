"""Operator actions against a real Apache Kafka, without Spark: what the coordinator answers after a
timeout abort, a commit and a re-initialised id (the facts invariant 15 rests on), a fenced answer
after a commit that landed (scenario 5), and two drivers deciding one batch (scenario 4).

The Spark forms (checkpoint rollback, a changed task layout) are in test_operator_actions.py.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from tests.test_sink_core import _spark_offsets
from txkafka.cli import main
from txkafka.connector.errors import ConcurrentWriterError, TransactionOutcomeUnknownError
from txkafka.connector.fault_injection import InjectedFault, arm, disarm
from txkafka.connector.sink.committable import TaskResult
from txkafka.connector.sink.committer import KafkaCommitter, WritePlan
from txkafka.connector.sink.task_writer import KafkaWriter, validate_input_schema
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.client.error_codes import INVALID_TXN_STATE, PRODUCER_FENCED
from txkafka.connector.client.transactions import FENCED_CODES, TransactionClient
from txkafka.connector.sink.transactional_ids import TransactionalIdFactory

pytestmark = [pytest.mark.kafka]


def _setup(kafka, ck, topic, **opts):
    cfg = SinkConfig.from_options({"kafka.bootstrap.servers": kafka.bootstrap, "topic": topic,
                                   "checkpointLocation": str(ck), **opts}, streaming=True)
    log = SinkCommitLog(str(ck))
    ids = TransactionalIdFactory(cfg.transactional_id_prefix, log.identity("x").sink_id)
    return cfg, log, ids


def _task(cfg, ids, batch, part, start, n, run="000000") -> TaskResult:
    """One task attempt that pre-committed ``n`` records (values v<start>..)."""
    batch_rows = pa.record_batch([pa.array([f"k{i}" for i in range(start, start + n)]),
                                  pa.array([f"v{i}".encode() for i in range(start, start + n)])],
                                 names=["key", "value"])
    schema = validate_input_schema({"key": "string", "value": "binary"}, cfg.topic)
    w = KafkaWriter(cfg, schema, batch_id=batch, partition_id=part, attempt=0,
                    transactional_id=ids.transactional_id(part, 0, run=run, batch_id=batch))
    c = w.write([batch_rows])
    w.release()
    return TaskResult(part, 0, batch, c, w.count)


def _zombie_init(kafka, transactional_id: str) -> None:
    """Another producer with the same transactional id starts (InitProducerId), as a zombie
    task attempt would."""
    p = kafka.producer(transactional_id)
    p.init_transactions(30)
    del p  # never close(): nothing of its own is open, and close() would only abort


def _describe_until(kafka, tid: str, done, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    with TransactionClient(kafka.conf) as tc:
        while True:
            d = tc.describe([tid])[tid]
            if done(d) or time.monotonic() > deadline:
                return d
            time.sleep(0.2)


def _values(kafka, topic) -> list[str]:
    return sorted(r.value.decode() for r in kafka.read_all(topic))


# ------------------------------------------------------------------- the broker's facts (15)

def test_coordinator_epochs_after_a_timeout_a_commit_and_a_fencing(kafka, tmp_path):
    """What the committer's confirmation of a fenced answer relies on (same producer id each time):
    - the coordinator's timeout abort moves epoch e to e+1, PrepareAbort/CompleteAbort, and a
      commit at e then answers PRODUCER_FENCED or INVALID_PRODUCER_EPOCH;
    - InitProducerId on an id whose transaction completed moves it to e+1, Empty (so a commit
      retried at e is fenced although it landed);
    - InitProducerId on an Ongoing transaction aborts it at e+1, the new producer gets e+2;
    - an abort at e answers a later commit at e with INVALID_TXN_STATE, state CompleteAbort at e;
    - the coordinator's aborts keep the transaction's start time (DescribeTransactions), which
      InitProducerId clears: how an abort of ours is told from a later transaction's at e+1.
    """
    topic = kafka.create_topic(partitions=1)
    cfg, _, ids = _setup(kafka, tmp_path / "a", topic, **{"kafka.transaction.timeout.ms": "3000"})
    with TransactionClient(kafka.conf) as tc:
        timed_out = _task(cfg, ids, 0, 0, 0, 5).committable
        started = tc.describe([timed_out.transactional_id])[timed_out.transactional_id]
        assert started.state == "Ongoing" and started.start_time_ms > 0, started
        d = _describe_until(kafka, timed_out.transactional_id, lambda d: d.state != "Ongoing")
        assert (d.producer_id, d.producer_epoch) == (timed_out.producer_id,
                                                      timed_out.producer_epoch + 1), d
        assert d.state in ("PrepareAbort", "CompleteAbort"), d
        d = _describe_until(kafka, timed_out.transactional_id,
                            lambda d: d.state == "CompleteAbort")
        assert d.start_time_ms == started.start_time_ms, (started, d)
        assert tc.end_many([timed_out.key], commit=True)[timed_out.transactional_id] in FENCED_CODES

        cfg, _, ids = _setup(kafka, tmp_path / "b", topic)
        committed = _task(cfg, ids, 0, 0, 100, 5).committable
        assert tc.end_many([committed.key], commit=True)[committed.transactional_id] == 0
        _describe_until(kafka, committed.transactional_id, lambda d: d.state == "CompleteCommit")
        _zombie_init(kafka, committed.transactional_id)
        d = tc.describe([committed.transactional_id])[committed.transactional_id]
        assert (d.producer_id, d.producer_epoch, d.state) == (
            committed.producer_id, committed.producer_epoch + 1, "Empty"), d
        assert d.start_time_ms == -1, d
        assert tc.end_many([committed.key], commit=True)[committed.transactional_id] \
            == PRODUCER_FENCED

        fenced = _task(cfg, ids, 0, 1, 200, 5).committable
        _zombie_init(kafka, fenced.transactional_id)
        d = tc.describe([fenced.transactional_id])[fenced.transactional_id]
        assert (d.producer_id, d.producer_epoch, d.state) == (
            fenced.producer_id, fenced.producer_epoch + 2, "Empty"), d

        aborted = _task(cfg, ids, 1, 0, 300, 5).committable
        started = tc.describe([aborted.transactional_id])[aborted.transactional_id]
        assert tc.end_many([aborted.key], commit=False)[aborted.transactional_id] == 0
        _describe_until(kafka, aborted.transactional_id, lambda d: d.state == "CompleteAbort")
        assert tc.end_many([aborted.key], commit=True)[aborted.transactional_id] \
            == INVALID_TXN_STATE
        d = tc.describe([aborted.transactional_id])[aborted.transactional_id]
        assert (d.producer_id, d.producer_epoch, d.state) == (
            aborted.producer_id, aborted.producer_epoch, "CompleteAbort"), d
        assert d.start_time_ms == started.start_time_ms, (started, d)
    assert _values(kafka, topic) == [f"v{i}" for i in range(100, 105)]


# ------------------------------------------------------------- scenario 5: fenced after commit

def test_a_fenced_answer_after_the_commit_landed_is_never_recorded_lost(kafka, tmp_path):
    """Batch 0's first commit lands, the driver dies before the rest, a zombie with the same id
    re-initialises it; the restart's roll-forward gets PRODUCER_FENCED for it. The partition is
    not recorded lost and not re-written: the query stops (outcome unknown) until the operator
    records it committed, and the output holds every record once."""
    topic = kafka.create_topic(partitions=2)
    ck = tmp_path / "ck"
    _spark_offsets(ck, 0, '{"in":{"0":20}}')
    cfg, log, ids = _setup(kafka, ck, topic)
    results = [_task(cfg, ids, 0, p, 10 * p, 10) for p in (0, 1)]
    arm("point=between_endtxn,action=raise")
    try:
        with pytest.raises(InjectedFault):
            KafkaCommitter(cfg, ids, log).commit(0, results)
    finally:
        disarm()
    first, second = (r.committable for r in results)
    assert log.batch_state(0).pending is not None
    _describe_until(kafka, first.transactional_id, lambda d: d.state == "CompleteCommit")
    _zombie_init(kafka, first.transactional_id)

    cfg, _, _ = _setup(kafka, ck, topic)
    with pytest.raises(TransactionOutcomeUnknownError) as exc:
        KafkaCommitter(cfg, ids, log).plan()
    msg = str(exc.value)
    assert first.transactional_id in msg and "PRODUCER_FENCED" in msg and "state Empty" in msg
    state = log.batch_state(0)
    assert state.pending is not None and state.redo_partitions == frozenset()
    note = log.read_unresolved(0, 0)
    assert note["committed"] == [second.transactional_id] and note["lost"] == []
    assert _values(kafka, topic) == sorted(f"v{i}" for i in range(20))  # once each

    assert main(["commit-log", "resolve", "--checkpoint", str(ck), "--batch", "0", "--committed",
                 "--yes"]) == 0
    assert KafkaCommitter(cfg, ids, log).plan() == WritePlan(0, skip=True)
    assert log.batch_state(0).complete
    assert _values(kafka, topic) == sorted(f"v{i}" for i in range(20))
    assert kafka.open_transactions(ids.sink_prefix) == []


# -------------------------------------------------------------- scenario 4: two drivers

def test_the_second_driver_to_decide_a_batch_fails_and_commits_nothing(kafka, tmp_path):
    """Two drivers of one checkpoint run batch 0 at once (each its own run, so its own ids); the
    first decides and commits while the second validates: the second's decision is refused."""
    topic = kafka.create_topic(partitions=2)
    ck = tmp_path / "ck"
    _spark_offsets(ck, 0, '{"in":{"0":20}}')
    cfg, log, ids = _setup(kafka, ck, topic)
    first = KafkaCommitter(cfg, ids, SinkCommitLog(str(ck)))
    second = KafkaCommitter(cfg, ids, SinkCommitLog(str(ck)))
    mine = [_task(cfg, ids, 0, p, 10 * p, 10, run="aaaaaa") for p in (0, 1)]
    theirs = [_task(cfg, ids, 0, p, 100 + 10 * p, 10, run="bbbbbb") for p in (0, 1)]

    class Race:
        armed = False

        @staticmethod
        def check(point, **kw):
            if point == "before_decision":
                first.commit(0, mine)

    second.faults = Race()
    with pytest.raises(ConcurrentWriterError, match="second driver"):
        second.commit(0, theirs)
    assert _values(kafka, topic) == sorted(f"v{i}" for i in range(20))
    assert {c.transactional_id for c in log.batch_state(0).last.decision} == \
        {r.committable.transactional_id for r in mine}
    assert kafka.open_transactions(ids.sink_prefix) == []
