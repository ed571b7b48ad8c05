"""Unit tests of the sink's core (no Spark, no broker): options, ids, commit log, plan, committer."""

from __future__ import annotations

import os
import re

import pytest

from tests.spark_checkpoint_files import write_offsets
from txkafka.connector.errors import (
    CommitLogError,
    ConcurrentWriterError,
    KafkaConfigError,
    KafkaProtocolError,
    TransactionError,
    TransactionLostError,
    TransactionOutcomeUnknownError,
)
from txkafka.connector.fault_injection import (
    FaultInjector,
    InjectedFault,
    arm,
    disarm,
    parse_spec,
    read_marker,
)
from txkafka.connector.sink.committable import KafkaCommittable, TaskResult
from txkafka.connector.sink.committer import KafkaCommitter, WritePlan
from txkafka.connector.sink import committer as committer_module
from txkafka.connector.sink.task_writer import validate_input_schema
from txkafka.connector.sink.figures import FiguresReader
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.sink.options import DeliveryGuarantee, SinkConfig
from txkafka.connector.client.error_codes import (
    COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    PRODUCER_FENCED,
    REQUEST_TIMED_OUT,
    TRANSACTIONAL_ID_NOT_FOUND,
)
from txkafka.connector.client.transactions import (
    TransactionDescription,
    TransactionListing,
)
from txkafka.connector.sink.transactional_ids import (
    LEGACY_RUN,
    IdParts,
    TransactionalIdFactory,
    prefix_of,
    run_tag,
)

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


def test_spark_sinks_include_headers_option_is_taken_and_ignored():
    for value in ("true", "false"):  # Spark's sink lists it and never reads it
        assert SinkConfig.from_options({**BASE, "includeHeaders": value}, streaming=True) == \
            SinkConfig.from_options(BASE, streaming=True)


def test_transaction_timeout_comes_from_kafka_option():
    cfg = SinkConfig.from_options({**BASE, "kafka.transaction.timeout.ms": "900000"}, streaming=True)
    assert cfg.transaction_timeout_ms == 900_000
    assert "transaction.timeout.ms" not in cfg.kafka


def test_transaction_timeout_error_names_the_kafka_option():
    name = r"option 'kafka\.transaction\.timeout\.ms'"  # the user's name, not librdkafka's
    with pytest.raises(KafkaConfigError, match=name + " must be >= 1000"):
        SinkConfig.from_options({**BASE, "kafka.transaction.timeout.ms": "999"}, streaming=True)
    with pytest.raises(KafkaConfigError, match=name + " must be an integer"):
        SinkConfig.from_options({**BASE, "kafka.transaction.timeout.ms": "1m"}, streaming=True)


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
    ({"includeHeaders": "yes"}, "option 'includeHeaders' must be true or false"),
])
def test_bad_options_name_the_option(extra, match):
    with pytest.raises(KafkaConfigError, match=match):
        SinkConfig.from_options({**BASE, **extra}, streaming=True)


@pytest.mark.parametrize("mode", ["PERMISSIVE", "dropmalformed", "anything"])
def test_writer_mode_other_than_failfast_fails_at_start_saying_why(mode):
    formats = {"valueFormat": "avro", "schema.registry.url": "http://registry:8081"}
    with pytest.raises(KafkaConfigError, match=f"option 'mode' is '{mode}', but the writer has "
                                               "FAILFAST only.*lost.*filter or fix"):
        SinkConfig.from_options({**BASE, **formats, "mode": mode}, streaming=True)
    cfg = SinkConfig.from_options({**BASE, **formats, "mode": "failfast"}, streaming=True)
    assert cfg.formats is not None and cfg.formats.mode == "FAILFAST"


def test_a_commit_timeout_python_cannot_wait_for_fails_at_start():
    # 10**13 ms passed before and ended, at the first commit, in a bare OverflowError of the
    # commit client's lock wait ("timestamp out of range for platform time_t").
    for raw in ("10000000000000", "2147483648"):
        with pytest.raises(KafkaConfigError, match="'commitTimeoutMs' must be at most 2147483647"):
            SinkConfig.from_options({**BASE, "commitTimeoutMs": raw}, streaming=True)
    assert SinkConfig.from_options({**BASE, "commitTimeoutMs": "2147483647"},
                                   streaming=True).commit_timeout_ms == 2**31 - 1


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
    # Two columns for one role (matched without regard to case): the tasks could read the other.
    with pytest.raises(KafkaConfigError, match=r"columns \['value', 'VALUE'\] all name"):
        validate_input_schema({"value": "binary", "VALUE": "int"}, "t")
    with pytest.raises(KafkaConfigError, match="'key' column"):
        validate_input_schema({"value": "binary", "Key": "string", "KEY": "binary"}, "t")
    assert not validate_input_schema({"value": "binary", "topic": "int", "Topic": "string"},
                                     "t").has_topic  # the option set: the columns are not read


# ----------------------------------------------------------------------------- ids

def test_ids_are_bounded_and_parse_back():
    f = TransactionalIdFactory("app", "ab12cd34")
    run = run_tag("run-uuid-1")
    tid = f.transactional_id(3, 1, run=run, batch_id=7)
    assert tid == f"app-ab12cd34-{run}-1-3-1"
    assert f.parse(tid) == IdParts(run, 1, 3, 1)
    assert f.parse("app-ab12cd34-3-1") == IdParts(LEGACY_RUN, -1, 3, 1)  # ids of the older shape
    assert f.parse("app-ab12cd34-3") is None
    assert f.parse(f"app-ab12cd34-{run}-2-3-0") is None  # parity is 0 or 1
    assert not f.owns("app-other-3-1")
    assert not f.owns("app-ab12cd34-x-1")
    ids = {f.transactional_id(p, a, run=run, batch_id=b) for p in range(4) for a in range(2)
           for b in range(50)}
    assert len(ids) == 16  # reused every other batch within a run


def test_the_prefix_is_read_back_from_either_shape():
    run = run_tag("r")
    for prefix in ("app", "orders-v2", "a-ab12cd34-x"):  # a prefix may hold dashes, even the id
        f = TransactionalIdFactory(prefix, "ab12cd34")
        assert prefix_of(f.transactional_id(3, 1, run=run, batch_id=5), "ab12cd34") == prefix
        assert prefix_of(f"{prefix}-ab12cd34-3-1", "ab12cd34") == prefix  # the older shape
    assert prefix_of(f"app-ab12cd34-{run}-1-3-1", "00000000") is None  # another sink
    assert prefix_of("app-ab12cd34-x-1", "ab12cd34") is None
    assert prefix_of(f"ab12cd34-{run}-1-3-1", "ab12cd34") is None  # no prefix


def test_ids_differ_across_runs_and_consecutive_batches():
    f = TransactionalIdFactory("app", "ab12cd34")
    base = f.transactional_id(0, 0, run=run_tag("a"), batch_id=4)
    assert base != f.transactional_id(0, 0, run=run_tag("b"), batch_id=4)
    assert base != f.transactional_id(0, 0, run=run_tag("a"), batch_id=5)
    assert base == f.transactional_id(0, 0, run=run_tag("a"), batch_id=6)
    assert run_tag(None) == "000000" and len(run_tag("x")) == 6


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


def test_a_decision_that_vanishes_after_listing_is_an_error_not_an_empty_round(tmp_path):
    # Read as "no transactions", recovery would mark the round done while they time out.
    log = SinkCommitLog(str(tmp_path))
    log.write_decision(3, 0, [_c("a", 0, 3)], [0])
    entries = log._entries()
    os.remove(log._name(3, 0, "decision"))
    with pytest.raises(CommitLogError, match="batch 3 round 0: its decision was listed"):
        log.batch_state(3, entries)


def test_commit_log_prune(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    for b in range(10):
        log.write_decision(b, 0, [_c("a", 0, b)], [0])
        log.write_outcome(b, 0, [_c("a", 0, b)], [])
    assert log.prune(keep_batches=3) == 14
    assert log.batch_ids() == [7, 8, 9]


def test_write_plan():
    assert WritePlan().should_write(0, 0)
    done = WritePlan(5, skip=True)
    assert not done.should_write(5, 0) and WritePlan(6).should_write(6, 0)
    redo = WritePlan(5, redo=frozenset({2}))
    assert redo.should_write(5, 2) and not redo.should_write(5, 1)
    # A task of another batch than the one planned never guesses (a skip could drop its rows).
    for plan in (done, redo, WritePlan(6)):
        with pytest.raises(TransactionError, match=r"task partition 1: Spark runs this task for "
                                                   r"batch 7 .* planned the writer for batch"):
            plan.should_write(7, 1)
    # A plan newer than the task's batch: another driver wrote that offsets file.
    for plan in (done, redo, WritePlan(6)):
        with pytest.raises(ConcurrentWriterError, match=r"batch 4 .* second driver"):
            plan.should_write(4, 1)


# ----------------------------------------------------------------------------- committer

class FakeCoordinator:
    """An in-memory stand-in for TransactionClient: unit tests of the committer's decisions only.
    Everything about real transactions is tested against Apache Kafka in integration_tests/."""

    def __init__(self):
        self.txns: dict[str, dict] = {}
        self.calls: list[tuple] = []
        self.fail_commit: set[str] = set()
        self.forgotten: dict[str, int] = {}  # id -> the code EndTxn answers (id expired)
        self.stuck: set[str] = set()  # EndTxn times out, the transaction stays open
        self.list_error: int | None = None  # ListTransactions fails with this code
        self.stale: dict[str, int] = {}  # id -> answers left from a resumed broker's old state

    def open(self, c: KafkaCommittable):
        import time as _t

        # (the coordinator's start time: set when the transaction starts, kept by its aborts)
        self.txns[c.transactional_id] = {"pid": c.producer_id, "epoch": c.producer_epoch,
                                         "state": "Ongoing", "start": int(_t.time() * 1000),
                                         "parts": c.topic_partitions}

    def describe(self, ids, fresh=False):

        ids = list(ids)
        self.calls.append(("describe", tuple(sorted(ids)), fresh))
        out = {}
        for tid in ids:
            t = self.txns.get(tid)
            if self.stale.get(tid, 0) > 0:  # a resumed broker's answer from before the task
                self.stale[tid] -= 1
                out[tid] = TransactionDescription(tid, 0, "CompleteCommit", 60000, 0, t["pid"],
                                                  t["epoch"] - 1, {})
            elif t:
                out[tid] = TransactionDescription(tid, 0, t["state"], 60000, t["start"], t["pid"],
                                                  t["epoch"], t.get("parts") or {"out": [0]})
        return out

    def end_many(self, items, commit, parallelism=8):
        out = {}
        for tid, pid, epoch in items:
            self.calls.append(("commit" if commit else "abort", tid))
            t = self.txns.get(tid)
            if tid in self.forgotten:
                out[tid] = self.forgotten[tid]
            elif tid in self.stuck:
                out[tid] = REQUEST_TIMED_OUT
            elif tid in self.fail_commit and commit:
                if t["state"] == "Ongoing":  # the coordinator's timeout abort bumps the epoch
                    t["state"], t["epoch"] = "CompleteAbort", t["epoch"] + 1
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
        if self.list_error is not None:
            raise TransactionError("ListTransactions: COORDINATOR_NOT_AVAILABLE", self.list_error)
        return [TransactionListing(tid, t["pid"], t["state"]) for tid, t in self.txns.items()
                if (prefix is None or tid.startswith(prefix)) and (not states or t["state"] in states)]


def _committer(tmp_path, fake, spec=None):
    if spec:
        arm(spec)  # the test disarms
    cfg = SinkConfig.from_options({**BASE, "checkpointLocation": str(tmp_path)}, streaming=True)
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


def test_the_commit_log_is_pruned_when_data_batches_miss_the_multiples_of_50(tmp_path):
    # An aggregation's data batches can all fall on odd ids (no-data batches in between): the
    # log must still be pruned, once per block of 50 ids, to the newest 100 batches.
    fake = FakeCoordinator()
    sizes = []
    for batch in range(1, 400, 2):
        committer, ids, log = _committer(tmp_path, fake)  # a new one per batch, as in Spark
        committer.commit(batch, _results(ids, fake, batch, [0]))
        sizes.append(len(log.batch_ids()))
    assert max(sizes) <= 125 and sizes[-1] >= 100, sizes
    assert log.batch_ids()[-1] == 399 and log.latest().complete


def test_prune_due_once_per_block_of_ids():
    from txkafka.connector.sink.committer import prune_due
    assert not prune_due(0, {}) and not prune_due(50, {})  # nothing logged before: nothing to prune
    assert prune_due(50, {49: {}}) and prune_due(51, {49: {}}) and prune_due(101, {1: {}, 49: {}})
    assert not prune_due(99, {50: {}, 99: {}}) and not prune_due(57, {51: {}})


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


def test_validation_failure_aborts_all_and_decides_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(committer_module, "_REASK_WAITS_S", (0.0, 0.0))
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    results = _results(ids, fake, 1, [0, 1])
    fake.txns[results[1].committable.transactional_id]["epoch"] = 9  # fenced by a zombie retry
    with pytest.raises(TransactionError, match="fenced by another attempt"):
        committer.commit(1, results)
    assert log.latest() is None
    assert fake.txns[results[0].committable.transactional_id]["state"] == "CompleteAbort"
    fenced = results[1].committable.transactional_id
    assert [c for c in fake.calls if c[0] == "describe"][1:] == [("describe", (fenced,), True)] * 2


def test_a_driver_clock_ahead_of_the_coordinators_does_not_fail_every_batch(tmp_path, caplog):
    """The coordinator's start time is on its clock, the driver's "now" on its own: with the
    driver's a minute ahead, every transaction looked past its 60 s timeout and every batch
    failed ("0.0s left ..."). No transaction of a batch is older than the batch: that bounds the
    age, and the skew is named once. A transaction really older than its batch's share of the
    timeout still fails, the clocks agreeing or not."""
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    committer.planned_at = committer_module.host_clock() - 1.0  # the batch began 1 s ago
    results = _results(ids, fake, 1, [0, 1])
    for r in results:  # started just now by a coordinator whose clock is 70 s behind the driver's
        fake.txns[r.committable.transactional_id]["start"] -= 70_000
    with caplog.at_level("WARNING", logger=committer_module.__name__):
        committer.commit(1, results)
    assert all(fake.txns[r.committable.transactional_id]["state"] == "CompleteCommit"
               for r in results)
    assert "the driver's clock is at least 69 s ahead of the transaction coordinator's" \
        in caplog.text

    # A batch planned 59 s ago (the clocks agreeing) leaves its transactions 1 s: refused.
    committer.planned_at = committer_module.host_clock() - 59.0
    late = _results(ids, fake, 2, [0])
    fake.txns[late[0].committable.transactional_id]["start"] -= 59_000
    with pytest.raises(TransactionError, match=r"s left of its 60s timeout"):
        committer.commit(2, late)


def test_a_stale_coordinator_answer_is_asked_again_not_failed(tmp_path, monkeypatch):
    """A broker that was frozen and resumes may answer DescribeTransactions from its stale state
    (the id's previous transaction, CompleteCommit) until its metadata catches up: the committer
    asks the coordinator found afresh, and commits once it sees the transaction open."""
    monkeypatch.setattr(committer_module, "_REASK_WAITS_S", (0.0, 0.0, 0.0))
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    results = _results(ids, fake, 1, [0, 1])
    stale_id = results[1].committable.transactional_id
    fake.stale = {stale_id: 2}
    committer.commit(1, results)
    assert all(fake.txns[r.committable.transactional_id]["state"] == "CompleteCommit"
               for r in results)
    assert [c for c in fake.calls if c[0] == "describe"][1:] == \
        [("describe", (stale_id,), True)] * 2
    fake.stale = {stale_id: 9}  # stale for longer than the re-asks: the batch fails, loudly
    results = _results(ids, fake, 2, [0, 1])
    with pytest.raises(TransactionError, match="state CompleteCommit, expected Ongoing"):
        committer.commit(2, results)


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
    disarm()


def test_lost_transaction_is_recorded_and_redone(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    _spark_offsets(tmp_path, 4, '{"in":{"0":40}}')
    results = _results(ids, fake, 4, [0, 1, 2])
    fake.fail_commit.add(results[1].committable.transactional_id)
    with pytest.raises(TransactionLostError, match=r"batch 4.*task partition 1"):
        committer.commit(4, results)
    plan = committer.plan()  # the restart plans batch 4 again (its offsets/4 is the newest)
    assert plan.redo == {1}
    assert [p for p in range(3) if plan.should_write(4, p)] == [1]
    redo = _results(ids, fake, 4, [1], attempt=0)
    fake.txns[redo[0].committable.transactional_id]["state"] = "Ongoing"
    fake.fail_commit.clear()
    report = committer.commit(4, [TaskResult(0, 0, 4, None, 0, True), redo[0],
                                  TaskResult(2, 0, 4, None, 0, True)])
    assert report.transactions == 1 and log.latest().complete
    # The sink's figures count both rounds in their batch (tests/test_monitoring.py).
    four = FiguresReader(log).newest()[-1]
    assert (four.status, four.committed, four.lost, four.rewritten, four.records) == (
        "complete", 3, 1, 1, 15)


def test_a_landed_commit_is_never_taken_for_lost_after_a_zombie_s_own_abort(tmp_path):
    """EndTxn(commit) lands but its answer is lost; a zombie attempt with the same id (PySpark
    has no stage attempt number) re-initialises it (epoch e+1) and its own transaction there is
    aborted. DescribeTransactions then shows the same producer, e+1, CompleteAbort: what the
    coordinator's timeout abort of ours looks like, but with another start time. Taking it for
    lost would write the committed task partition again."""

    class AnswerLost(FakeCoordinator):
        def end_many(self, items, commit, parallelism=8):
            out = super().end_many(items, commit, parallelism)
            if commit and self.lose in out:
                out[self.lose] = REQUEST_TIMED_OUT  # committed; the answer never came
                self.lose = None
            return out

    fake = AnswerLost()
    committer, ids, log = _committer(tmp_path, fake)
    _spark_offsets(tmp_path, 6, '{"in":{"0":60}}')
    results = _results(ids, fake, 6, [0, 1])
    t1 = results[1].committable
    fake.lose = t1.transactional_id
    with pytest.raises(TransactionError, match="did not finish"):
        committer.commit(6, results)
    txn = fake.txns[t1.transactional_id]
    assert txn["state"] == "CompleteCommit"
    txn.update(epoch=t1.producer_epoch + 1, state="Ongoing", start=txn["start"] + 5000)  # zombie
    with pytest.raises(TransactionOutcomeUnknownError):
        committer.abort(6, results)
    assert txn["state"] == "CompleteAbort" and txn["epoch"] == t1.producer_epoch + 1
    with pytest.raises(TransactionOutcomeUnknownError,
                       match=f"epoch {t1.producer_epoch + 1}, state CompleteAbort"):
        _committer(tmp_path, fake)[0].plan()  # the restart: unknown, never "lost"
    assert log.latest().pending is not None  # no outcome recorded


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
    fired = read_marker(str(marker))
    assert fired["point"] == "after_decision" and fired["batch"] == 1, fired
    assert fired["pid"] == os.getpid() and fired["partition"] is None, fired


# ----------------------------------------------------------------- ambiguous outcomes (invariant 8)

def _spark_offsets(tmp_path, batch, line):
    write_offsets(tmp_path, batch, line)


def _decide_then_crash(tmp_path, fake, batch, parts):
    """A run that wrote the decision of ``batch`` and died before any EndTxn."""
    crashing, ids, log = _committer(tmp_path, fake, spec="point=after_decision,action=raise")
    results = _results(ids, fake, batch, parts)
    try:
        with pytest.raises(InjectedFault):
            crashing.commit(batch, results)
    finally:
        disarm()
    return ids, log, [r.committable for r in results]


@pytest.mark.parametrize("code", [INVALID_PRODUCER_ID_MAPPING, TRANSACTIONAL_ID_NOT_FOUND])
def test_roll_forward_of_a_forgotten_id_stops_with_outcome_unknown(tmp_path, code):
    fake = FakeCoordinator()
    ids, log, (t0, t1, t2) = _decide_then_crash(tmp_path, fake, 5, [0, 1, 2])
    _spark_offsets(tmp_path, 5, '{"in":{"0":42}}')
    # While the driver was down: t0's commit had landed, t2 timed out, t1's id expired.
    fake.txns[t0.transactional_id]["state"] = "CompleteCommit"
    fake.txns[t2.transactional_id]["state"] = "CompleteAbort"
    fake.forgotten[t1.transactional_id] = code
    committer, _, _ = _committer(tmp_path, fake)
    with pytest.raises(TransactionOutcomeUnknownError) as exc:
        committer.recover()
    msg = str(exc.value)
    for part in ("batch 5", t1.transactional_id, "task partition 1", "out[1]", '{"in":{"0":42}}',
                 "transactional.id.expiration.ms", f"--checkpoint {tmp_path} --batch 5 --committed",
                 "--lost"):
        assert part in msg
    assert t0.transactional_id not in msg and t2.transactional_id not in msg
    state = log.latest()
    assert state.pending is not None  # no outcome: neither rewritten nor declared done
    # Every later attempt (a restart, the planning of the re-run) stops the same way.
    with pytest.raises(TransactionOutcomeUnknownError):
        _committer(tmp_path, fake)[0].recover()


def test_epoch_codes_stay_lost(tmp_path):
    fake = FakeCoordinator()
    ids, log, (t0, t1) = _decide_then_crash(tmp_path, fake, 2, [0, 1])
    # The coordinator's timeout abort: epoch e+1, aborted (same producer id).
    fake.txns[t1.transactional_id].update(epoch=t1.producer_epoch + 1, state="CompleteAbort")
    state = _committer(tmp_path, fake)[0].recover()
    assert state.redo_partitions == {1} and state.pending is None


def test_abort_reraises_outcome_unknown_after_aborting_the_rest(tmp_path):
    fake = FakeCoordinator()
    ids, log, (t0, t1) = _decide_then_crash(tmp_path, fake, 3, [0, 1])
    fake.forgotten[t0.transactional_id] = INVALID_PRODUCER_ID_MAPPING
    committer, _, _ = _committer(tmp_path, fake)
    orphan = _results(ids, fake, 3, [1], attempt=1)[0]
    with pytest.raises(TransactionOutcomeUnknownError):
        committer.abort(3, [orphan])
    assert fake.txns[orphan.committable.transactional_id]["state"] == "CompleteAbort"
    assert fake.txns[t1.transactional_id]["state"] == "CompleteCommit"  # rolled forward
    assert log.latest().pending is not None


@pytest.mark.parametrize("error", [KafkaProtocolError("cannot reach the coordinator"),
                                   CommitLogError("cannot write the outcome")])
def test_abort_aborts_the_undecided_rest_when_recovery_fails_otherwise(tmp_path, error):
    # Not only a TransactionError: an unreachable broker or a failed outcome write in recovery
    # must not leave this attempt's undecided transactions open until their timeout.
    fake = FakeCoordinator()
    ids, log, (t0, t1) = _decide_then_crash(tmp_path, fake, 3, [0, 1])
    committer, _, _ = _committer(tmp_path, fake)
    orphan = _results(ids, fake, 3, [1], attempt=1)[0]

    def failing_recover():
        raise error

    committer.recover = failing_recover
    with pytest.raises(type(error)):
        committer.abort(3, [orphan, *(TaskResult(c.partition_id, 0, 3, c, 1) for c in (t0, t1))])
    assert fake.txns[orphan.committable.transactional_id]["state"] == "CompleteAbort"
    # the decided ones are never aborted: recovery commits them later
    assert [fake.txns[c.transactional_id]["state"] for c in (t0, t1)] == ["Ongoing", "Ongoing"]


# ------------------------------------------------------------- transactions, not ids (invariant 6)

def test_abort_of_a_failed_redo_round_aborts_the_reused_id(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    results = _results(ids, fake, 4, [0, 1])
    lost_tid = results[1].committable.transactional_id
    fake.fail_commit.add(lost_tid)
    with pytest.raises(TransactionLostError):
        committer.commit(4, results)
    fake.fail_commit.clear()
    # The re-run writes task partition 1 again on the same id, at a new epoch (round 1) ...
    redo = KafkaCommittable(lost_tid, 101, 5, 1, 0, 4, 5, {"out": [1]})
    fake.open(redo)
    failing, _, _ = _committer(tmp_path, fake, spec="point=before_decision,action=raise")
    try:
        with pytest.raises(InjectedFault):  # ... and its commit fails before the decision.
            failing.commit(4, [TaskResult(0, 0, 4, None, 0, True), TaskResult(1, 0, 4, redo, 5)])
    finally:
        disarm()
    committer.abort(4, [TaskResult(0, 0, 4, None, 0, True), TaskResult(1, 0, 4, redo, 5)])
    # Round 0 decided lost_tid at epoch 4, not this transaction: nothing may keep it open.
    assert fake.txns[lost_tid]["state"] == "CompleteAbort"
    assert fake.list_transactions(states=["Ongoing"]) == []


def test_sweep_spares_only_the_exact_transaction_it_is_told_to_keep(tmp_path):
    fake = FakeCoordinator()
    committer, ids, _ = _committer(tmp_path, fake)
    (kept,) = [r.committable for r in _results(ids, fake, 1, [0])]
    assert committer.sweep_orphans(keep={kept.key}) == 0
    stale = (kept.transactional_id, kept.producer_id, kept.producer_epoch + 1)
    assert committer.sweep_orphans(keep={stale}) == 1
    assert fake.txns[kept.transactional_id]["state"] == "CompleteAbort"


def test_abort_keeps_a_round_whose_commit_did_not_finish(tmp_path):
    """Regression guard: a decided round that is still pending is never aborted by abort()."""
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    results = _results(ids, fake, 6, [0, 1])
    stuck = results[0].committable.transactional_id
    fake.stuck.add(stuck)
    with pytest.raises(TransactionError, match="did not finish"):
        committer.commit(6, results)
    with pytest.raises(TransactionError, match="did not finish"):
        committer.abort(6, results)
    assert fake.txns[stuck]["state"] == "Ongoing" and log.latest().pending is not None
    fake.stuck.clear()
    assert committer.recover().complete
    assert fake.txns[stuck]["state"] == "CompleteCommit"


# --------------------------------------------------------------- sweeps after a durable outcome

def test_a_failed_sweep_does_not_fail_a_committed_batch(tmp_path, caplog):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    results = _results(ids, fake, 1, [0, 1])
    fake.list_error = COORDINATOR_NOT_AVAILABLE
    report = committer.commit(1, results)
    assert report.transactions == 2 and report.orphans_aborted == 0
    assert log.latest().complete
    assert "orphan sweep failed" in caplog.text
    # The re-run of a batch the log says is complete is not failed by its sweep either.
    assert committer.commit(1, [TaskResult(0, 0, 1, None, 0, True)]).skipped
    # Nor a batch without rows whose task was retried (a broker down during the sweep).
    report = committer.commit(2, [TaskResult(0, 1, 2, None, 0, True)])
    assert report.transactions == 0 and log.batch_state(2).complete


# ------------------------------------------------------------------------- batch ids (item 5)

def test_results_of_another_batch_are_refused_and_aborted(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    good = _results(ids, fake, 7, [0])
    stray = _results(ids, fake, 0, [1])  # a task that did not know its batch and wrote as batch 0
    with pytest.raises(TransactionError, match=r"batch 7: 1 task result.*task partition 1 "
                                               r"attempt 0: batch 0.*streaming\.sql\.batchId"):
        committer.commit(7, good + stray)
    assert log.latest() is None  # nothing decided
    assert fake.txns[stray[0].committable.transactional_id]["state"] == "CompleteAbort"


@pytest.mark.parametrize("name, raw", [
    ("transactionalIdPrefix", ""), ("commitTimeoutMs", ""), ("commitParallelism", " "),
    ("kafka.transaction.timeout.ms", ""), ("commitTimeoutMs", "1_000_000"),
    ("kafka.transaction.timeout.ms", "90_000"), ("commitParallelism", "8.0"),
])
def test_empty_or_non_java_numbers_fail_naming_the_option(name, raw):
    """An empty value never takes the default silently, and numbers follow the reader's rule
    (Java's Long.parseLong: no underscores), from the one shared parser."""
    with pytest.raises(KafkaConfigError, match=f"option '{re.escape(name)}' must be"):
        SinkConfig.from_options({**BASE, name: raw}, streaming=True)


def test_signed_and_spaced_numbers_read_as_on_the_reader():
    cfg = SinkConfig.from_options({**BASE, "commitParallelism": " +3 "}, streaming=True)
    assert cfg.commit_parallelism == 3
