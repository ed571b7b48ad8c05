"""Operator actions (invariants 11, 12, 14, 15) without Spark or a broker: the commit log's records,
the source-offset comparison, the task-layout check, exclusive records and the confirmation of a
fenced answer. Against real Spark and Kafka: integration_tests/test_operator_actions.py."""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import re

import pyarrow as pa
import pytest

from tests.test_sink_core import (
    FakeCoordinator,
    _committer,
    _decide_then_crash,
    _results,
    _spark_offsets,
)
from txkafka.cli import main
from txkafka.connector.sink import commit_log as sink_commit_log
from txkafka.connector.errors import (
    CheckpointMismatchError,
    CommitLogError,
    ConcurrentWriterError,
    TaskLayoutChangedError,
    TransactionError,
    TransactionLostError,
    TransactionOutcomeUnknownError,
)
from txkafka.connector.sink.committable import KafkaCommittable, TaskResult
from txkafka.connector.sink.committer import WritePlan
from txkafka.connector.sink.partition_input import InputDigest, PartitionInput
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.client.error_codes import INVALID_TXN_STATE

OFFSETS_A = '{"in":{"0":400,"1":380}}'
OFFSETS_B = '{"in":{"0":520,"1":380}}'


def _c(tid: str, part: int, batch: int = 1) -> KafkaCommittable:
    return KafkaCommittable(tid, 7, 0, part, 0, batch, 10, {"out": [part]})


# ----------------------------------------------------------------------------- record formats

def test_a_decision_records_the_source_offsets_and_the_task_layout(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    layout = {0: PartitionInput(10, 40, 90, "00ff"), 1: PartitionInput(0, 0, 0, "0000")}
    log.write_decision(3, 0, [_c("a", 0, 3)], [0, 1], source_offsets=(OFFSETS_A,), layout=layout)
    state = log.batch_state(3)
    assert state.source_offsets == (OFFSETS_A,)
    assert state.last.layout == layout and not state.empty and state.pending is not None
    raw = json.loads((tmp_path / "txkafka-sink" / "log" / f"{3:020d}-000.decision.json").read_text())
    assert raw["source_offsets"] == [OFFSETS_A] and raw["layout"]["0"]["rows"] == 10


def test_an_empty_batch_is_one_record_with_its_offsets(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    log.write_empty(4, (OFFSETS_A,), [0, 1])
    assert sorted(os.listdir(tmp_path / "txkafka-sink" / "log")) == [f"{4:020d}-000.empty.json"]
    state = log.latest()
    assert state.batch_id == 4 and state.empty and state.complete and state.pending is None
    assert state.source_offsets == (OFFSETS_A,) and state.redo_partitions == frozenset()
    assert state.last.decision == [] and state.last.lost == []


def test_prune_removes_empty_batch_records_too(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    for b in range(6):
        if b % 2:
            log.write_empty(b, (OFFSETS_A,), [0])
        else:
            log.write_decision(b, 0, [_c("a", 0, b)], [0])
            log.write_outcome(b, 0, [_c("a", 0, b)], [])
    assert log.prune(keep_batches=2) == 6 and log.batch_ids() == [4, 5]


def test_an_empty_record_beside_a_decision_is_an_error(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    log.write_empty(2, (OFFSETS_A,), [0])
    log.write_decision(2, 0, [_c("a", 0, 2)], [0])
    with pytest.raises(CommitLogError, match="batch 2 has an empty-batch record and other records"):
        log.batch_state(2)


def test_records_written_before_offsets_and_layouts_read_as_unknown(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    d = tmp_path / "txkafka-sink" / "log"
    d.mkdir(parents=True)
    (d / f"{1:020d}-000.decision.json").write_text(json.dumps(
        {"batch_id": 1, "round": 0, "all_partitions": [0], "transactions": [_c("a", 0).to_json()]}))
    state = log.batch_state(1)
    assert state.source_offsets is None and state.last.layout is None


# ------------------------------------------------------------------- exclusive records (14)

def test_records_are_created_exclusively_the_unresolved_note_is_not(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    log.write_decision(1, 0, [_c("a", 0)], [0], source_offsets=(OFFSETS_A,))
    with pytest.raises(ConcurrentWriterError, match=r"00000000000000000001-000\.decision\.json.*"
                                                    r"second driver"):
        log.write_decision(1, 0, [_c("b", 0)], [0])
    assert [c.transactional_id for c in log.batch_state(1).last.decision] == ["a"]  # unchanged
    log.write_outcome(1, 0, [_c("a", 0)], [])
    with pytest.raises(ConcurrentWriterError):
        log.write_outcome(1, 0, [], [_c("a", 0)])
    log.write_empty(2, (OFFSETS_A,), [0])
    with pytest.raises(ConcurrentWriterError):
        log.write_empty(2, (OFFSETS_B,), [0])
    log.write_unresolved(1, 0, {"resolved": {}})
    log.write_unresolved(1, 0, {"resolved": {"a": "committed"}})
    assert log.read_unresolved(1, 0) == {"resolved": {"a": "committed"}}
    assert not [n for n in os.listdir(tmp_path / "txkafka-sink" / "log") if n.endswith(".tmp")]


def test_a_concurrent_start_keeps_the_first_sink_identity(tmp_path, monkeypatch):
    first = SinkCommitLog(str(tmp_path)).identity("app")
    other = SinkCommitLog(str(tmp_path))
    real_read = other._read
    reads = []

    def stale_read(path):  # the other start looked before the first one wrote sink.json
        reads.append(path)
        return None if len(reads) == 1 else real_read(path)

    monkeypatch.setattr(other, "_read", stale_read)
    assert other.identity("app").sink_id == first.sink_id


def test_without_hard_links_a_record_is_checked_before_and_read_back_after(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(sink_commit_log.os, "link", no_links)
    log = SinkCommitLog(str(tmp_path))
    log.write_decision(1, 0, [_c("a", 0)], [0])
    with pytest.raises(ConcurrentWriterError):
        log.write_decision(1, 0, [_c("b", 0)], [0])
    assert [c.transactional_id for c in log.batch_state(1).last.decision] == ["a"]


def test_object_stores_detect_a_racing_writer_by_its_nonce(tmp_path, monkeypatch):
    log = SinkCommitLog(str(tmp_path))
    log._atomic_put = True  # as on S3/GCS: a whole-object PUT, no rename, no conditional create
    log.write_decision(1, 0, [_c("a", 0)], [0])
    with pytest.raises(ConcurrentWriterError):  # checked before the PUT
        log.write_decision(1, 0, [_c("b", 0)], [0])
    real_read = log._read
    # Another driver's PUT of the same name lands between this PUT and its read-back.
    monkeypatch.setattr(log, "_read", lambda path: {**(real_read(path) or {}), "writer": "other"})
    with pytest.raises(ConcurrentWriterError):
        log.write_outcome(1, 0, [_c("a", 0)], [])


def test_the_second_driver_to_decide_a_batch_fails_and_aborts_its_own(tmp_path):
    """Two drivers ran batch 1 at once; the second one's decision is refused, its transactions
    are aborted and nothing of the first one's is touched."""
    fake = FakeCoordinator()
    first, ids, log = _committer(tmp_path, fake)
    second, _, _ = _committer(tmp_path, fake)
    mine = _results(ids, fake, 1, [0, 1])
    theirs = _results(ids, fake, 1, [0, 1], attempt=1)
    class Race:  # the other driver decides and commits while this one validates
        armed = False

        @staticmethod
        def check(point, **kw):
            if point == "before_decision":
                first.commit(1, mine)

    second.faults = Race()  # (FaultInjector objects are shared: never patch one)
    with pytest.raises(ConcurrentWriterError):
        second.commit(1, theirs)
    assert [fake.txns[r.committable.transactional_id]["state"] for r in mine] == ["CompleteCommit"] * 2
    assert [fake.txns[r.committable.transactional_id]["state"] for r in theirs] == ["CompleteAbort"] * 2
    assert {c.transactional_id for c in log.batch_state(1).last.decision} == \
        {r.committable.transactional_id for r in mine}


# ----------------------------------------------------------------- source offsets (invariant 11)

def test_plan_of_a_new_batch_writes_everything(tmp_path):
    fake = FakeCoordinator()
    committer, _, _ = _committer(tmp_path, fake)
    _spark_offsets(tmp_path, 0, OFFSETS_A)
    assert committer.plan() == WritePlan(0)
    assert _committer(tmp_path, fake)[0].plan() == WritePlan(0)  # nothing logged: a fresh sink


def test_a_replay_with_the_same_offsets_is_skipped_and_logged(tmp_path, caplog):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    _spark_offsets(tmp_path, 3, OFFSETS_A)
    committer.commit(3, _results(ids, fake, 3, [0, 1]))
    assert log.batch_state(3).source_offsets == (OFFSETS_A,)
    # Spark re-plans batch 3 (commits/3 lost): the same offsets, written in another key order.
    _spark_offsets(tmp_path, 3, '{"in":{"1":380,"0":400}}')
    with caplog.at_level(logging.WARNING):
        plan = _committer(tmp_path, fake)[0].plan()
    assert plan == WritePlan(3, skip=True) and not plan.should_write(3, 0)
    assert "batch 3: the sink committed this batch already" in caplog.text
    assert "The re-run writes nothing" in caplog.text


def test_other_offsets_for_a_committed_batch_stop_before_any_task_writes(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    for b, off in ((0, '{"in":{"0":200,"1":190}}'), (1, OFFSETS_A)):
        _spark_offsets(tmp_path, b, off)
        committer.commit(b, _results(ids, fake, b, [0, 1]))
    # The operator deleted offsets/1 and commits/1; more input arrived; Spark re-plans batch 1.
    _spark_offsets(tmp_path, 1, OFFSETS_B)
    with pytest.raises(CheckpointMismatchError) as exc:
        _committer(tmp_path, fake)[0].plan()
    msg = str(exc.value)
    for part in ("batch 1:", f"source offsets {OFFSETS_B} (offsets/1)",
                 f"already committed batch 1 reading {OFFSETS_A}", "rolled back",
                 "restore the removed or edited files", "NEW checkpointLocation",
                 "startingOffsets", f"the last batch the sink committed is batch 1, whose end "
                 f"offsets are {OFFSETS_A}", f"commit-log show --checkpoint {tmp_path}",
                 "docs/operations.md"):
        assert part in msg, part


def test_commit_compares_again_and_aborts_a_mismatched_rerun(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    _spark_offsets(tmp_path, 2, OFFSETS_A)
    committer.commit(2, _results(ids, fake, 2, [0]))
    _spark_offsets(tmp_path, 2, OFFSETS_B)  # changed after the tasks were planned
    rerun = _results(ids, fake, 2, [0, 1], attempt=1)
    with pytest.raises(CheckpointMismatchError, match="batch 2"):
        _committer(tmp_path, fake)[0].commit(2, rerun)
    assert all(fake.txns[r.committable.transactional_id]["state"] == "CompleteAbort" for r in rerun)
    assert len(log.batch_state(2).rounds) == 1  # nothing decided


def test_a_batch_missing_from_a_log_that_has_later_ones_is_an_error(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    for b in (5, 6):
        _spark_offsets(tmp_path, b, OFFSETS_A)
        committer.commit(b, _results(ids, fake, b, [0]))
    for f in (tmp_path / "offsets").iterdir():
        f.unlink()
    _spark_offsets(tmp_path, 2, OFFSETS_A)  # pruned, or an older txkafka's batch without data
    with pytest.raises(CheckpointMismatchError, match=r"batch 2: .* later batches \(up to 6\) "
                                                      r"and none of batch 2"):
        _committer(tmp_path, fake)[0].plan()


def test_an_empty_batch_is_recorded_and_its_replay_compared(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    _spark_offsets(tmp_path, 0, OFFSETS_A)
    empty = [TaskResult(0, 0, 0, None, 0), TaskResult(1, 0, 0, None, 0)]
    assert committer.commit(0, empty).transactions == 0
    assert log.batch_state(0).empty and log.batch_state(0).source_offsets == (OFFSETS_A,)
    assert _committer(tmp_path, fake)[0].plan() == WritePlan(0, skip=True)
    _spark_offsets(tmp_path, 0, OFFSETS_B)
    with pytest.raises(CheckpointMismatchError, match="already committed batch 0"):
        _committer(tmp_path, fake)[0].plan()


def test_a_record_without_offsets_is_replayed_as_before_with_a_warning(tmp_path, caplog):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    committer.commit(4, _results(ids, fake, 4, [0]))  # no offsets/4: nothing to record
    _spark_offsets(tmp_path, 4, OFFSETS_B)
    with caplog.at_level(logging.WARNING):
        assert _committer(tmp_path, fake)[0].plan() == WritePlan(4, skip=True)
    assert "predates txkafka recording source offsets" in caplog.text


# ------------------------------------------------------------------- task layout (invariant 12)

def _lost_round(tmp_path, fake, layout_rows=(5, 5)):
    """Batch 4 decided with len(layout_rows) task partitions; the broker aborted partition 1."""
    committer, ids, log = _committer(tmp_path, fake)
    _spark_offsets(tmp_path, 4, OFFSETS_A)
    results = [TaskResult(r.partition_id, 0, 4, r.committable, 5,
                          input=PartitionInput(n, 10 * n, 20 * n, f"{p:016x}"))
               for p, (r, n) in enumerate(zip(_results(ids, fake, 4, range(len(layout_rows))),
                                              layout_rows))]
    fake.fail_commit.add(results[1].committable.transactional_id)
    with pytest.raises(TransactionLostError):
        committer.commit(4, results)
    fake.fail_commit.clear()
    return ids, log


def _rerun(ids, fake, layout: dict[int, PartitionInput], redo=(1,)):
    out = []
    for p, inp in layout.items():
        if p in redo:
            c = KafkaCommittable(ids.transactional_id(p, 0), 300 + p, 9, p, 0, 4, inp.rows,
                                 {"out": [p]})
            fake.open(c)
            out.append(TaskResult(p, 0, 4, c, inp.rows, input=inp))
        else:
            out.append(TaskResult(p, 0, 4, None, 0, True, input=inp))
    return out


def _same(p: int, n: int = 5) -> PartitionInput:
    return PartitionInput(n, 10 * n, 20 * n, f"{p:016x}")


def test_a_lost_round_is_rewritten_by_the_same_layout(tmp_path):
    fake = FakeCoordinator()
    ids, log = _lost_round(tmp_path, fake)
    committer, _, _ = _committer(tmp_path, fake)
    assert committer.plan() == WritePlan(4, redo=frozenset({1}), round_no=1)
    report = committer.commit(4, _rerun(ids, fake, {0: _same(0), 1: _same(1)}))
    assert report.transactions == 1 and log.batch_state(4).complete
    assert log.batch_state(4).rounds[1].layout == {0: _same(0), 1: _same(1)}


@pytest.mark.parametrize("now, expected", [
    ({p: _same(p, 2 if p < 2 else 3) for p in range(4)},
     r"2 task partitions then \(0, 1\), 4 now \(0-3\); task partition 0: 5 rows then, 2 now"),
    ({0: _same(0), 1: _same(1, 3)}, r"task partition 1: 5 rows then, 3 now"),
    ({0: _same(0), 1: PartitionInput(5, 50, 100, "feed")},
     r"task partition 1: 5 rows both times, but other rows \(key digest differ\)"),
])
def test_another_layout_aborts_the_whole_rerun_and_names_the_settings(tmp_path, now, expected):
    fake = FakeCoordinator()
    ids, log = _lost_round(tmp_path, fake)
    rerun = _rerun(ids, fake, now, redo=(0, 1))  # the new layout's tasks 0 and 1 wrote
    with pytest.raises(TaskLayoutChangedError) as exc:
        _committer(tmp_path, fake)[0].commit(4, rerun)
    msg = str(exc.value)
    assert "batch 4:" in msg and "task partitions [1]" in msg
    assert re.search(expected, msg), msg
    for setting in ("minPartitions", "maxRecordsPerPartition", "spark.sql.shuffle.partitions",
                    "repartition()/coalesce()", "non-deterministic", "docs/operations.md"):
        assert setting in msg
    for r in rerun:
        if r.committable is not None:
            assert fake.txns[r.committable.transactional_id]["state"] == "CompleteAbort"
    state = log.batch_state(4)
    assert len(state.rounds) == 1 and state.redo_partitions == {1}  # nothing of the re-run decided


def test_a_round_decided_before_layouts_compares_partitions_and_lost_rows(tmp_path):
    fake = FakeCoordinator()
    ids, log = _lost_round(tmp_path, fake)
    path = tmp_path / "txkafka-sink" / "log" / f"{4:020d}-000.decision.json"
    rec = json.loads(path.read_text())
    del rec["layout"]
    path.write_text(json.dumps(rec))
    with pytest.raises(TaskLayoutChangedError, match=r"task partition 1: 5 rows then, 4 now"):
        _committer(tmp_path, fake)[0].commit(4, _rerun(ids, fake, {0: _same(0), 1: _same(1, 4)}))
    assert _committer(tmp_path, fake)[0].commit(
        4, _rerun(ids, fake, {0: _same(0, 9), 1: _same(1)})).transactions == 1


# ------------------------------------------------------------ fenced answers (invariant 15)

def _crashed_after_commit(tmp_path, fake):
    """Batch 5 decided; the commit of task partition 1 landed but the driver died before the
    outcome was recorded."""
    ids, log, (t0, t1) = _decide_then_crash(tmp_path, fake, 5, [0, 1])
    fake.txns[t1.transactional_id]["state"] = "CompleteCommit"
    return log, t0, t1


def test_fenced_after_a_commit_that_landed_is_not_lost(tmp_path):
    """A zombie with the same id re-initialised it after the commit: Empty at epoch e+1."""
    fake = FakeCoordinator()
    log, t0, t1 = _crashed_after_commit(tmp_path, fake)
    fake.txns[t1.transactional_id].update(state="Empty", epoch=t1.producer_epoch + 1)
    with pytest.raises(TransactionOutcomeUnknownError) as exc:
        _committer(tmp_path, fake)[0].recover()
    msg = str(exc.value)
    assert t1.transactional_id in msg and "PRODUCER_FENCED" in msg and "state Empty" in msg
    assert "zombie" in msg and "--committed" in msg
    state = log.batch_state(5)
    assert state.pending is not None and state.redo_partitions == frozenset()  # never re-written
    assert log.read_unresolved(5, 0)["committed"] == [t0.transactional_id]


@pytest.mark.parametrize("epoch_delta, state, code, lost", [
    (1, "CompleteAbort", None, True),       # the coordinator's timeout abort
    (1, "PrepareAbort", None, True),
    (0, "CompleteAbort", INVALID_TXN_STATE, True),  # an abort at the decided epoch
    (2, "Empty", None, False),              # fenced while Ongoing, then a new producer: unknown
    (2, "CompleteAbort", None, False),
    (1, "Ongoing", None, False),            # a zombie's new transaction
    (1, "Empty", None, False),
])
def test_which_fenced_answers_are_confirmed_lost(tmp_path, epoch_delta, state, code, lost):
    fake = FakeCoordinator()
    ids, log, (t0, t1) = _decide_then_crash(tmp_path, fake, 5, [0, 1])
    fake.txns[t1.transactional_id].update(state=state, epoch=t1.producer_epoch + epoch_delta)
    committer = _committer(tmp_path, fake)[0]
    if code is not None:
        real_end = fake.end_many
        fake.end_many = lambda items, commit, parallelism=8: {
            **real_end(items, commit, parallelism), t1.transactional_id: code}
    if lost:
        assert committer.recover().redo_partitions == {1}
    else:
        with pytest.raises(TransactionOutcomeUnknownError):
            committer.recover()
        assert log.batch_state(5).pending is not None


def test_another_producer_id_is_not_a_confirmed_loss(tmp_path):
    fake = FakeCoordinator()
    ids, log, (t0, t1) = _decide_then_crash(tmp_path, fake, 5, [0, 1])
    fake.txns[t1.transactional_id].update(state="CompleteAbort", pid=999,
                                          epoch=t1.producer_epoch + 1)
    with pytest.raises(TransactionOutcomeUnknownError):
        _committer(tmp_path, fake)[0].recover()


def test_no_description_keeps_the_decision_for_the_next_attempt(tmp_path):
    fake = FakeCoordinator()
    ids, log, (t0, t1) = _decide_then_crash(tmp_path, fake, 5, [0, 1])
    fake.txns[t1.transactional_id].update(state="CompleteAbort", epoch=t1.producer_epoch + 1)
    committer = _committer(tmp_path, fake)[0]

    def unreachable(ids):
        raise TransactionError("DescribeTransactions: COORDINATOR_NOT_AVAILABLE")

    fake.describe = unreachable
    with pytest.raises(TransactionError, match="did not finish"):
        committer.recover()
    assert log.batch_state(5).pending is not None


# --------------------------------------------------------------------------- the digest

def _batch(rows, key="key"):
    return pa.record_batch([pa.array([k for k, _ in rows], pa.binary()),
                            pa.array([v for _, v in rows], pa.string())], names=[key, "value"])


def _digest(rows, chunk):
    d = InputDigest()
    for i in range(0, len(rows), chunk):
        d.update(_batch(rows[i:i + chunk]))
    return d.result()


def test_the_digest_ignores_row_order_and_batching_not_content():
    rows = [(f"k{i}".encode() if i % 5 else (None if i % 10 else b""), f"v{i}") for i in range(500)]
    base = _digest(rows, 500)
    assert base.rows == 500 and base.key_bytes == sum(len(k or b"") for k, _ in rows)
    assert base.value_bytes == sum(len(v) for _, v in rows)
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    assert _digest(shuffled, 37) == base
    changed = rows[:]
    changed[3] = (b"k4", changed[3][1])  # a key of another row: same bytes in total
    assert _digest(changed, 500).key_hash != base.key_hash
    assert _digest(changed, 500).key_bytes == base.key_bytes
    nulled = rows[:]
    nulled[10] = (None, nulled[10][1])  # an empty key became null
    assert rows[10][0] == b"" and _digest(nulled, 500).key_hash != base.key_hash


def test_the_digest_reads_sliced_large_and_case_insensitive_columns():
    d1, d2 = InputDigest(), InputDigest()
    full = _batch([(b"ab", "x"), (b"cd", "y"), (b"ef", "z")], key="KEY")
    d1.update(full.slice(1, 2))
    d2.update(pa.record_batch([pa.array(["cd", "ef"], pa.large_string()),
                               pa.array(["y", "z"], pa.large_string())], names=["key", "value"]))
    assert d1.result() == d2.result() and d1.result().key_bytes == 4
    no_key = InputDigest()
    no_key.update(pa.record_batch([pa.array([b"v"] * 3)], names=["value"]))
    assert no_key.result().rows == 3 and no_key.result().key_bytes == 0


def test_a_task_result_without_a_digest_reports_its_rows():
    assert TaskResult(0, 0, 1, None, 7).read() == PartitionInput(7)
    assert TaskResult(0, 0, 1, None, 0, True).read() == PartitionInput(None)  # drained, unknown
    assert PartitionInput(None).difference(PartitionInput(4, 1, 1, "aa")) is None


# -------------------------------------------------------------------------- the operator CLI

def test_commit_log_show_prints_each_batchs_source_offsets(tmp_path, capsys):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    _spark_offsets(tmp_path, 0, OFFSETS_A)
    committer.commit(0, _results(ids, fake, 0, [0, 1]))
    _spark_offsets(tmp_path, 1, OFFSETS_B)
    committer.commit(1, [TaskResult(0, 0, 1, None, 0)])
    assert main(["commit-log", "show", "--checkpoint", str(tmp_path), "--json"]) == 0
    shown = {b["batch"]: b for b in json.loads(capsys.readouterr().out)["batches"]}
    assert shown[0]["source_offsets"] == [OFFSETS_A] and shown[0]["status"] == "complete"
    assert shown[1] == {"batch": 1, "status": "complete (no rows)", "source_offsets": [OFFSETS_B],
                        "rounds": []}
    assert main(["commit-log", "show", "--checkpoint", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert f"source offsets: {OFFSETS_A}" in text and "complete (no rows)" in text
    assert f"last complete batch: 1; a query on a new checkpoint continues after it with " \
           f"startingOffsets {OFFSETS_B}" in text


def test_the_resume_option_drops_batch_0s_start():
    from txkafka.connector.checkpoint.savepoint import resume_option

    logged = '{"in":{"0":400,"1":380},"txkafka:start":{"in":{"0":0,"1":0}}}'
    assert resume_option(logged) == '{"in":{"0":400,"1":380}}'
    assert resume_option("-") == "-" and resume_option("[1]") == "[1]"
