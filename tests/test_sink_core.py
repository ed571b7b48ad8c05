"""Unit tests of the sink's core (no Spark, no broker): options, ids, commit log, plan, committer."""

from __future__ import annotations

import pytest

from txkafka.connector.errors import KafkaConfigError, TransactionError, TransactionLostError
from txkafka.connector.fault_injection import FaultInjector, InjectedFault, parse_spec
from txkafka.connector.kafka_committable import KafkaCommittable, TaskResult
from txkafka.connector.kafka_committer import KafkaCommitter, WritePlan
from txkafka.connector.kafka_writer import validate_input_schema
from txkafka.connector.sink_commit_log import SinkCommitLog
from txkafka.connector.sink_options import DeliveryGuarantee, SinkConfig
from txkafka.connector.transaction_client import (
    INVALID_TXN_STATE,
    PRODUCER_FENCED,
    TransactionDescription,
    TransactionListing,
)
from txkafka.connector.transactional_id_factory import TransactionalIdFactory

BASE = {"kafka.bootstrap.servers": "h:9092", "topic": "out", "checkpointLocation": "/tmp/x"}


# ----------------------------------------------------------------------------- options

def test_defaults():
    cfg = SinkConfig.from_options(BASE, streaming=True)
    assert cfg.guarantee is DeliveryGuarantee.EXACTLY_ONCE
    assert cfg.transactional_id_prefix == "txkafka"
    assert cfg.transaction_timeout_ms == 60_000
    assert cfg.kafka == {"bootstrap.servers": "h:9092"}


def test_option_names_are_case_insensitive():
    cfg = SinkConfig.from_options({**BASE, "DELIVERYGUARANTEE": "AT_LEAST_ONCE",
                                   "transactionalidprefix": "app1"}, streaming=True)
    assert cfg.guarantee is DeliveryGuarantee.AT_LEAST_ONCE
    assert cfg.transactional_id_prefix == "app1"


def test_transaction_timeout_comes_from_kafka_option():
    cfg = SinkConfig.from_options({**BASE, "kafka.transaction.timeout.ms": "900000"}, streaming=True)
    assert cfg.transaction_timeout_ms == 900_000
    assert "transaction.timeout.ms" not in cfg.kafka


@pytest.mark.parametrize("extra, match", [
    ({"deliveryGuarantee": "twice"}, "deliveryGuarantee"),
    ({"transactionalIdPrefix": "has space"}, "transactionalIdPrefix"),
    ({"kafka.transaction.timeout.ms": "soon"}, "transaction.timeout.ms"),
    ({"kafka.transaction.timeout.ms": "10"}, ">= 1000"),
    ({"kafka.transactional.id": "x"}, "transactionalIdPrefix"),
    ({"kafka.key.serializer": "x"}, "kafka.key.serializer"),
    ({"kafka.value.serializer": "x"}, "kafka.value.serializer"),
    ({"topic": " "}, "'topic' is empty"),
    ({"commitTimeoutMs": "-5"}, "commitTimeoutMs"),
])
def test_bad_options_name_the_option(extra, match):
    with pytest.raises(KafkaConfigError, match=match):
        SinkConfig.from_options({**BASE, **extra}, streaming=True)


def test_exactly_once_streaming_needs_a_checkpoint():
    opts = {k: v for k, v in BASE.items() if k != "checkpointLocation"}
    with pytest.raises(KafkaConfigError, match="checkpointLocation"):
        SinkConfig.from_options(opts, streaming=True)
    SinkConfig.from_options(opts, streaming=False)
    SinkConfig.from_options({**opts, "deliveryGuarantee": "at_least_once"}, streaming=True)


def test_repr_hides_secrets():
    cfg = SinkConfig.from_options({**BASE, "kafka.sasl.password": "hunter2"}, streaming=True)
    assert "hunter2" not in repr(cfg)


# ----------------------------------------------------------------------------- schema

def test_schema_rules():
    s = validate_input_schema({"key": "string", "value": "binary", "topic": "string"}, None)
    assert s.has_key and s.has_topic and not s.has_headers
    assert not validate_input_schema({"value": "string", "topic": "string"}, "t").has_topic
    with pytest.raises(KafkaConfigError, match="'value' column"):
        validate_input_schema({"key": "string"}, "t")
    with pytest.raises(KafkaConfigError, match="no topic"):
        validate_input_schema({"value": "string"}, None)
    with pytest.raises(KafkaConfigError, match="'value' must be string or binary"):
        validate_input_schema({"value": "int"}, "t")
    with pytest.raises(KafkaConfigError, match="headers"):
        validate_input_schema({"value": "string", "headers": "map<string,string>"}, "t")


# ----------------------------------------------------------------------------- ids

def test_ids_are_bounded_and_parse_back():
    f = TransactionalIdFactory("app", "ab12cd34")
    assert f.transactional_id(3, 1) == "app-ab12cd34-3-1"
    assert f.parse("app-ab12cd34-3-1") == (3, 1)
    assert f.parse("app-ab12cd34-3") is None
    assert not f.owns("app-other-3-1")
    assert not f.owns("app-ab12cd34-x-1")
    ids = {f.transactional_id(p, a) for p in range(4) for a in range(2) for _batch in range(50)}
    assert len(ids) == 8  # reused every batch


# ----------------------------------------------------------------------------- commit log

def _c(tid: str, part: int, batch: int = 1, pid: int = 7, epoch: int = 0) -> KafkaCommittable:
    return KafkaCommittable(tid, pid, epoch, part, 0, batch, 10, {"out": [part]})


def test_commit_log_rounds(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    ident = log.identity("app")
    assert log.identity("other").sink_id == ident.sink_id  # created once
    assert log.latest() is None
    log.write_decision(1, 0, [_c("a", 0), _c("b", 1)], [0, 1])
    st = log.latest()
    assert st.batch_id == 1 and st.pending is not None and not st.complete
    log.write_outcome(1, 0, [_c("a", 0)], [_c("b", 1)])
    st = log.batch_state(1)
    assert st.pending is None and not st.complete and st.redo_partitions == {1}
    log.write_decision(1, 1, [_c("b2", 1)], [1])
    log.write_outcome(1, 1, [_c("b2", 1)], [])
    st = log.latest()
    assert st.complete and st.redo_partitions == frozenset() and len(st.rounds) == 2


def test_commit_log_prune(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    for b in range(10):
        log.write_decision(b, 0, [_c("a", 0, b)], [0])
        log.write_outcome(b, 0, [_c("a", 0, b)], [])
    assert log.prune(keep_batches=3) == 14
    assert log.batch_ids() == [7, 8, 9]


def test_write_plan():
    assert WritePlan().should_write(0, 0)
    done = WritePlan(5, True, frozenset())
    assert not done.should_write(5, 0) and not done.should_write(4, 1) and done.should_write(6, 0)
    redo = WritePlan(5, False, frozenset({2}))
    assert redo.should_write(5, 2) and not redo.should_write(5, 1) and redo.should_write(6, 1)


# ----------------------------------------------------------------------------- committer

class FakeCoordinator:
    """An in-memory stand-in for TransactionClient: unit tests of the committer's decisions only.
    Everything about real transactions is tested against Apache Kafka in integration_tests/."""

    def __init__(self):
        self.txns: dict[str, dict] = {}
        self.calls: list[tuple] = []
        self.fail_commit: set[str] = set()

    def open(self, c: KafkaCommittable):
        self.txns[c.transactional_id] = {"pid": c.producer_id, "epoch": c.producer_epoch,
                                         "state": "Ongoing", "start": 0}

    def describe(self, ids):
        import time as _t

        out = {}
        for tid in ids:
            t = self.txns.get(tid)
            if t:
                out[tid] = TransactionDescription(tid, 0, t["state"], 60000,
                                                  int(_t.time() * 1000) - t["start"], t["pid"],
                                                  t["epoch"], {"out": [0]})
        return out

    def end_many(self, items, commit, parallelism=8):
        out = {}
        for tid, pid, epoch in items:
            self.calls.append(("commit" if commit else "abort", tid))
            t = self.txns.get(tid)
            if tid in self.fail_commit and commit:
                t["state"] = "CompleteAbort"
                out[tid] = PRODUCER_FENCED
            elif t is None or (t["pid"], t["epoch"]) != (pid, epoch):
                out[tid] = PRODUCER_FENCED
            elif t["state"] == "Ongoing":
                t["state"] = "CompleteCommit" if commit else "CompleteAbort"
                out[tid] = 0
            elif t["state"] == ("CompleteCommit" if commit else "CompleteAbort"):
                out[tid] = 0
            else:
                out[tid] = INVALID_TXN_STATE
        return out

    def list_transactions(self, prefix=None, states=()):
        return [TransactionListing(tid, t["pid"], t["state"]) for tid, t in self.txns.items()
                if (prefix is None or tid.startswith(prefix)) and (not states or t["state"] in states)]


def _committer(tmp_path, fake, spec=None):
    cfg = SinkConfig.from_options({**BASE, "checkpointLocation": str(tmp_path),
                                   **({"txkafka.faultInjection": spec} if spec else {})},
                                  streaming=True)
    log = SinkCommitLog(str(tmp_path))
    ids = TransactionalIdFactory("txkafka", log.identity("txkafka").sink_id)
    return KafkaCommitter(cfg, ids, log, client=fake), ids, log


def _results(ids, fake, batch, parts, attempt=0):
    out = []
    for p in parts:
        c = KafkaCommittable(ids.transactional_id(p, attempt), 100 + p, batch, p, attempt, batch, 5,
                             {"out": [p]})
        fake.open(c)
        out.append(TaskResult(p, attempt, batch, c, 5))
    return out


def test_commit_decides_then_commits_and_sweeps_orphans(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    results = _results(ids, fake, 1, [0, 1])
    orphan = _results(ids, fake, 1, [0], attempt=1)[0].committable  # a speculative loser
    report = committer.commit(1, results)
    assert report.transactions == 2 and report.records == 10 and report.orphans_aborted == 1
    assert fake.txns[orphan.transactional_id]["state"] == "CompleteAbort"
    assert log.latest().complete
    # Spark re-runs batch 1 (crash after the sink commit): the re-run's output is aborted.
    rerun = _results(ids, fake, 1, [0, 1])
    fake.txns[rerun[0].committable.transactional_id]["epoch"] = 1  # a fresh init bumped it
    rerun = [TaskResult(r.partition_id, 0, 1, KafkaCommittable(**{**r.committable.to_json(),
             "producer_epoch": fake.txns[r.committable.transactional_id]["epoch"]}), 5) for r in rerun]
    report = committer.commit(1, rerun)
    assert report.skipped and report.aborted == 2


def test_validation_failure_aborts_all_and_decides_nothing(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    results = _results(ids, fake, 1, [0, 1])
    fake.txns[results[1].committable.transactional_id]["epoch"] = 9  # fenced by a zombie retry
    with pytest.raises(TransactionError, match="fenced by another attempt"):
        committer.commit(1, results)
    assert log.latest() is None
    assert fake.txns[results[0].committable.transactional_id]["state"] == "CompleteAbort"


def test_crash_after_decision_is_rolled_forward_not_aborted(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake, spec="point=after_decision,action=raise")
    results = _results(ids, fake, 3, [0, 1])
    with pytest.raises(InjectedFault):
        committer.commit(3, results)
    assert log.latest().pending is not None
    # Spark calls abort(): a decided batch still commits.
    committer.abort(3, results)
    assert all(fake.txns[r.committable.transactional_id]["state"] == "CompleteCommit" for r in results)
    assert log.latest().complete
    FaultInjector._cache.clear()


def test_lost_transaction_is_recorded_and_redone(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    results = _results(ids, fake, 4, [0, 1, 2])
    fake.fail_commit.add(results[1].committable.transactional_id)
    with pytest.raises(TransactionLostError, match=r"batch 4.*task partition 1"):
        committer.commit(4, results)
    state = committer.recover()
    plan = WritePlan.from_state(state)
    assert plan.redo == {1}
    assert [p for p in range(3) if plan.should_write(4, p)] == [1]
    redo = _results(ids, fake, 4, [1], attempt=0)
    fake.txns[redo[0].committable.transactional_id]["state"] = "Ongoing"
    fake.fail_commit.clear()
    report = committer.commit(4, [TaskResult(0, 0, 4, None, 0, True), redo[0],
                                  TaskResult(2, 0, 4, None, 0, True)])
    assert report.transactions == 1 and log.latest().complete


def test_fault_spec_parsing():
    rules = parse_spec("point=after_decision,batch=3,action=kill;point=after_precommit,attempt=0")
    assert [(r.point, r.action, r.filters) for r in rules] == [
        ("after_decision", "kill", {"batch": 3}), ("after_precommit", "raise", {"attempt": 0})]
    with pytest.raises(KafkaConfigError, match="point"):
        parse_spec("point=nowhere")
    with pytest.raises(KafkaConfigError, match="action"):
        parse_spec("point=after_decision,action=explode")


def test_fault_once_marker(tmp_path):
    marker = tmp_path / "m"
    inj = FaultInjector(parse_spec(f"point=after_decision,once={marker}"))
    with pytest.raises(InjectedFault):
        inj.check("after_decision", batch=1)
    inj.check("after_decision", batch=2)  # fired once already
    assert marker.exists()
