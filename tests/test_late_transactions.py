"""Late attempts (invariant 13), without a broker: the follow-up sweep's decision rule and its
order, its schedule, and the task-side checks of the commit log.

Against Apache Kafka and Spark: integration_tests/test_late_transactions.py.
"""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pyarrow as pa

from tests.spark_checkpoint_files import write_commits
from txkafka.connector.sink import task_writer as kafka_writer
from txkafka.connector.sink import late_transactions as lts
from txkafka.connector.sink.committable import KafkaCommittable
from txkafka.connector.sink.task_writer import KafkaWriter, LateCheck
from txkafka.connector.sink.late_transactions import (
    FollowUpSweeps,
    LogProgress,
    late_transactions,
    read_progress,
    sweep_offsets,
    sweep_once,
)
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.client.transactions import TransactionDescription, TransactionListing
from txkafka.connector.sink.transactional_ids import TransactionalIdFactory

RUN = "a1b2c3"
IDS = TransactionalIdFactory("txkafka", "ab12cd34")


def tid(batch: int, partition: int = 0, attempt: int = 0, ids: TransactionalIdFactory = IDS,
        run: str = RUN) -> str:
    return ids.transactional_id(partition, attempt, run=run, batch_id=batch)


# ----------------------------------------------------------------------------- decision rule

def test_aborts_other_parity_and_legacy_ids_spares_the_running_batch_and_other_sinks():
    late = (tid(4, 0, 1), 11, 0)             # batch 4's losing attempt: M = 4 committed
    running = (tid(5, 1), 12, 3)              # batch 5 is running
    older_same_parity = (tid(3, 0), 13, 2)    # batch 3 (parity of 5): spared, caught later
    legacy = ("txkafka-ab12cd34-2-0", 14, 0)  # an id of the older shape: never the running batch's
    other_sink = (tid(4, ids=TransactionalIdFactory("txkafka", "ffffffff")), 15, 0)
    listed = [late, running, older_same_parity, legacy, other_sink]
    assert late_transactions(listed, IDS, LogProgress(4)) == [late, legacy]


def test_a_pending_round_is_spared_by_its_exact_transaction_only():
    decided = (tid(2, 0), 20, 4)
    reused = (tid(2, 0), 20, 5)  # same id, a newer epoch: not what the round decided
    assert late_transactions([decided, reused], IDS, LogProgress(4, frozenset({decided}))) == [
        reused]


def test_before_any_batch_completed_only_legacy_ids_are_late():
    listed = [(tid(0), 1, 0), (tid(1), 2, 0), ("txkafka-ab12cd34-0-0", 3, 0)]
    assert late_transactions(listed, IDS, LogProgress(None)) == [("txkafka-ab12cd34-0-0", 3, 0)]


# ----------------------------------------------------------------------------- the checkpoint

def _committable(batch: int, partition: int, pid: int = 7, epoch: int = 0) -> KafkaCommittable:
    return KafkaCommittable(tid(batch, partition), pid, epoch, partition, 0, batch, 5,
                            {"out": [partition]})


def _spark_commits(root, *batches: int) -> None:
    write_commits(root, *batches, crc=True)


def _complete(log: SinkCommitLog, batch: int, lost: bool = False) -> None:
    c = _committable(batch, 0)
    log.write_decision(batch, 0, [c], [0])
    log.write_outcome(batch, 0, [] if lost else [c], [c] if lost else [])


def test_progress_takes_the_newer_of_spark_s_commits_and_the_sink_s_log(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    assert read_progress(log) == LogProgress(None)
    _spark_commits(tmp_path, 0, 1, 2, 3)
    _complete(log, 2)
    assert read_progress(log) == LogProgress(3)
    _complete(log, 4)  # the sink committed 4; Spark has not written commits/4 yet
    assert read_progress(log) == LogProgress(4)


def test_a_batch_the_sink_recorded_as_empty_is_complete(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    _spark_commits(tmp_path, 0, 1)
    log.write_empty(2, None, [0, 1])  # committed with no rows; Spark's commits/2 not yet there
    assert read_progress(log) == LogProgress(2)


def test_a_batch_with_lost_partitions_is_not_complete_and_a_pending_round_is_named(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    _spark_commits(tmp_path, 0, 1)
    _complete(log, 1)
    _complete(log, 2, lost=True)  # Spark re-runs batch 2: its redo round is the running batch
    assert read_progress(log) == LogProgress(1)
    pending = _committable(3, 1, pid=9, epoch=2)
    log.write_decision(3, 0, [pending], [1])
    assert read_progress(log) == LogProgress(1, frozenset({pending.key}))


# ----------------------------------------------------------------------------- one sweep

class FakeClient:
    """ListTransactions/DescribeTransactions/EndTxn over an in-memory table; ``on_describe``
    runs right after DescribeTransactions answered (what happens meanwhile in a real cluster)."""

    def __init__(self, open_txns: list[tuple[str, int, int]]) -> None:
        self.txns = {t[0]: [t[1], t[2], "Ongoing"] for t in open_txns}
        self.events: list[str] = []
        self.on_describe = lambda: None

    def list_transactions(self, prefix=None, states=()):
        self.events.append("list")
        return [TransactionListing(t, v[0], v[2]) for t, v in sorted(self.txns.items())
                if t.startswith(prefix or "") and (not states or v[2] in states)]

    def describe(self, ids, fresh=False):
        self.events.append("describe")
        out = {t: TransactionDescription(t, 0, self.txns[t][2], 60000, 0, self.txns[t][0],
                                         self.txns[t][1]) for t in ids if t in self.txns}
        self.on_describe()
        return out

    def end_many(self, items, commit, parallelism=8):
        self.events.append("abort" if not commit else "commit")
        codes = {}
        for t, pid, epoch in items:
            cur = self.txns.get(t)
            if cur is None or (cur[0], cur[1]) != (pid, epoch) or cur[2] != "Ongoing":
                codes[t] = 90  # PRODUCER_FENCED / not that transaction
            else:
                cur[2] = "CompleteAbort"
                codes[t] = 0
        return codes


def test_the_sweep_reads_the_checkpoint_after_the_listing_so_a_race_spares_the_next_batch(
        tmp_path, monkeypatch):
    """Batch 3 is the newest committed; batch 4 runs; a late attempt of batch 3 is open. Between
    the listing and the checkpoint read, batch 4 commits and batch 5 starts on the late attempt's
    id (a new epoch). The sweep must take M = 4: it aborts batch 4's leftover, spares the id of
    batch 3's attempt (batch 5's parity; a later sweep ends it) and never touches batch 5."""
    log = SinkCommitLog(str(tmp_path))
    _spark_commits(tmp_path, 0, 1, 2, 3)
    late3 = (tid(3, 0, 1), 30, 0)
    left4 = (tid(4, 1, 1), 40, 0)
    client = FakeClient([late3, left4])

    def batch_4_commits_and_5_starts():
        _spark_commits(tmp_path, 4)
        client.txns[late3[0]] = [30, 1, "Ongoing"]  # batch 5's attempt re-initialised the id

    client.on_describe = batch_4_commits_and_5_starts
    order = []
    real = lts.read_progress
    monkeypatch.setattr(lts, "read_progress", lambda cl: order.append(len(client.events))
                        or real(cl))
    assert sweep_once(client, IDS, log) == [left4]
    assert client.events == ["list", "describe", "abort"] and order == [2]
    assert client.txns[late3[0]] == [30, 1, "Ongoing"]  # batch 5's transaction is untouched
    # The next sweep, with nothing new committed, spares batch 5 still (its parity runs).
    assert sweep_once(client, IDS, log) == []


def test_nothing_open_costs_one_listing():
    client = FakeClient([(tid(1, ids=TransactionalIdFactory("txkafka", "ffffffff")), 1, 0)])
    assert sweep_once(client, IDS, None) == [] and client.events == ["list"]


def test_a_batch_write_aborts_everything_open_under_its_own_prefix():
    write_ids = TransactionalIdFactory("txkafka", "b1234abcd")
    mine = [(tid(0, p, ids=write_ids), 50 + p, 0) for p in range(3)]
    client = FakeClient(mine + [(tid(0), 9, 0)])
    assert sorted(sweep_once(client, write_ids, None)) == sorted(mine)
    assert client.txns[tid(0)][2] == "Ongoing"


# ----------------------------------------------------------------------------- schedule

def test_schedule_is_dense_for_20_seconds_then_sparse_until_the_transaction_timeout():
    assert sweep_offsets(60) == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 25, 30, 35, 40, 45, 50, 55, 60]
    assert sweep_offsets(5) == [2, 4]
    assert sweep_offsets(24) == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]


def _wait(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_sweeps_run_in_one_thread_that_never_raises_and_ends_with_its_schedule():
    sweeper = FollowUpSweeps("unit")
    calls = []

    def sweep():
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            raise RuntimeError("broker down")  # logged; the schedule goes on

    # The later times are far apart: sweeps whose time passed while one ran are folded into one
    # (by design), so a first sweep slowed by a busy machine must not swallow the second.
    sweeper.restart(sweep, [0.01, 2.0, 2.5])
    _wait(lambda: not sweeper.active)
    assert 2 <= len(calls) <= 3 and set(calls) == {"txkafka-late-sweeps-unit"}  # went on
    before = len(calls)
    sweeper.restart(sweep, [0.01])  # a new commit starts a new schedule (and thread)
    _wait(lambda: not sweeper.active)
    assert len(calls) == before + 1


def test_a_restart_starts_the_schedule_again():
    sweeper = FollowUpSweeps("unit-restart")
    started = threading.Event()
    release = threading.Event()
    calls = []

    def slow_first():
        calls.append(time.monotonic())
        if len(calls) == 1:
            started.set()
            release.wait(20)

    sweeper.restart(slow_first, [0.01, 30.0])  # the second sweep is far away...
    assert started.wait(20)
    # ...until a commit restarts the schedule. Its second sweep is 0.5 s on: sweeps whose times
    # all passed during a slow one collapse into one, so the release must come before it.
    sweeper.restart(slow_first, [0.01, 0.5])
    release.set()
    _wait(lambda: not sweeper.active)
    assert len(calls) == 3


def test_one_sweeper_per_sink_and_checkpoint(tmp_path):
    client = FakeClient([])
    log = SinkCommitLog(str(tmp_path))
    a = lts.follow_up(client, IDS, log, 1000)
    b = lts.follow_up(client, IDS, log, 1000)
    c = lts.follow_up(client, TransactionalIdFactory("txkafka", "b0000001"), None, 1000)
    assert a is b and a is not c


def test_sweepers_whose_schedule_ended_are_not_kept(monkeypatch):
    """A batch write has a sink id of its own, so ``df.write`` inside ``foreachBatch`` brings a
    new sink at every micro-batch: the process keeps only the sweepers still sweeping (and the
    one asked for), not one per write for the rest of its life."""
    monkeypatch.setattr(lts, "_SWEEPERS", {})
    client = FakeClient([])
    writes = [lts.follow_up(client, TransactionalIdFactory("txkafka", f"b{i:08x}"), None, 1)
              for i in range(30)]  # a 1 ms transaction timeout: no sweep to wait for
    _wait(lambda: not any(s.active for s in writes))
    lts.follow_up(client, TransactionalIdFactory("txkafka", "b99999999"), None, 1)
    assert len(lts._SWEEPERS) <= 2


# ----------------------------------------------------------------------------- task side

def test_late_once_its_round_is_decided_or_spark_finished_the_batch(tmp_path):
    log = SinkCommitLog(str(tmp_path))
    _complete(log, 4)
    log.write_decision(5, 0, [_committable(5, 0)], [0])
    assert LateCheck(str(tmp_path), 5, 0).decided()      # its round is decided
    assert not LateCheck(str(tmp_path), 5, 1).decided()  # a redo round of 5, not decided yet
    assert not LateCheck(str(tmp_path), 6, 0).decided()
    _spark_commits(tmp_path, 6)  # batch 6 wrote nothing (no record) but Spark finished it
    assert LateCheck(str(tmp_path), 6, 0).decided()


def test_a_task_that_cannot_read_the_checkpoint_skips_the_check(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    assert LateCheck(str(blocker / "ck"), 3, 0).decided() is False


class FakeTxnProducer:
    """Enough of a transactional confluent-kafka Producer for the task's control flow."""

    def __init__(self, conf: dict) -> None:
        self.stats_cb = conf["stats_cb"]
        self.calls: list[str] = []
        self.sent = 0

    def list_topics(self, *a, **k):
        return None

    def init_transactions(self, timeout):
        self.calls.append("init")

    def begin_transaction(self):
        self.calls.append("begin")

    def produce(self, topic, value=None, key=None, *a, **k):
        self.sent += 1

    def poll(self, timeout=0):
        self.stats_cb(json.dumps({"eos": {"producer_id": 5, "producer_epoch": 1,
                                          "txn_state": "InTransaction"},
                                  "topics": {"out": {"partitions": {"0": {"txmsgs": self.sent}}}}}))
        return 0

    def flush(self, timeout=None):
        self.calls.append("flush")
        return 0

    def abort_transaction(self, timeout=None):
        self.calls.append("abort")


def _task(monkeypatch, tmp_path, log_batches: dict[int, bool] | None = None,
          decided_after_flush: bool = False):
    producers: list[FakeTxnProducer] = []
    monkeypatch.setattr(kafka_writer, "_new_producer",
                        lambda conf: producers.append(FakeTxnProducer(conf)) or producers[-1])
    log = SinkCommitLog(str(tmp_path))
    for b, complete in (log_batches or {}).items():
        c = _committable(b, 0)
        log.write_decision(b, 0, [c], [0])
        if complete:
            log.write_outcome(b, 0, [c], [])
    cfg = SinkConfig.from_options({"kafka.bootstrap.servers": "h:9092", "topic": "out",
                                   "checkpointLocation": str(tmp_path)}, streaming=True)
    w = KafkaWriter(cfg, kafka_writer.validate_input_schema({"value": "binary"}, "out"),
                    batch_id=6, partition_id=0, attempt=0, transactional_id=tid(6),
                    late_check=LateCheck(str(tmp_path), 6, 0))

    def rows():
        yield pa.RecordBatch.from_pydict({"value": pa.array([b"a", b"b"])})
        if decided_after_flush:  # the winner's batch is decided while this attempt writes
            c = _committable(6, 0, pid=99)
            log.write_decision(6, 0, [c], [0])

    return w, w.write(rows()), producers


def test_a_task_of_a_decided_batch_writes_nothing_and_fences_nothing(monkeypatch, tmp_path):
    """Not even init_transactions: batch N+2 uses batch N's ids (the parity), so a zombie of
    batch N that reached write() late would fence, and abort, N+2's open transaction."""
    w, out, producers = _task(monkeypatch, tmp_path, {5: True, 6: False})
    assert out is None and w.late
    assert producers == []  # no producer, so no init_transactions


def test_a_task_whose_batch_is_decided_while_it_writes_aborts_its_own_transaction(
        monkeypatch, tmp_path):
    w, out, producers = _task(monkeypatch, tmp_path, {5: True}, decided_after_flush=True)
    assert out is None and w.late
    assert producers[0].calls == ["init", "begin", "flush", "abort"]


def test_a_task_of_the_running_batch_pre_commits(monkeypatch, tmp_path):
    w, out, producers = _task(monkeypatch, tmp_path, {5: True})
    assert not w.late and out is not None and out.record_count == 2
    assert producers[0].calls == ["init", "begin", "flush"]


def test_before_first_produce_is_a_fault_point():
    from txkafka.connector.fault_injection import parse_spec

    assert parse_spec("point=before_first_produce,attempt=0,action=sleep,ms=1")[0].ms == 1


def test_the_task_check_is_cheap_on_local_disk(tmp_path):
    """Not a timing assertion (the machine is shared): prints the cost for the report."""
    log = SinkCommitLog(str(tmp_path))
    for b in range(150):
        _complete(log, b)
    _spark_commits(tmp_path, *range(150))
    check = LateCheck(str(tmp_path), 150, 0)
    assert check.decided() is False
    started = time.perf_counter()
    for _ in range(200):
        check.decided()
    print(f"\nLateCheck.decided(), 150 logged batches: "
          f"{(time.perf_counter() - started) / 200 * 1000:.3f} ms")


def test_a_slow_sweep_is_not_followed_by_a_burst(monkeypatch):
    """The schedule's clock is the test's: it moves only when the test moves it, so which times
    passed during the slow sweep does not depend on the machine's load."""
    now = [0.0]
    monkeypatch.setattr(lts, "time", SimpleNamespace(monotonic=lambda: now[0]))
    sweeper = FollowUpSweeps("unit-slow")
    calls: list[float] = []
    release = threading.Event()

    def slow() -> None:
        calls.append(now[0])
        if len(calls) == 1:
            release.wait(20)  # the test moves the clock past the next four times meanwhile

    def move_to(t: float) -> None:
        with sweeper._cond:  # wakes the schedule's wait to look at the clock again
            now[0] = t
            sweeper._cond.notify_all()

    sweeper.restart(slow, [0.01, 0.1, 0.2, 0.3, 0.4, 1.0])
    move_to(0.01)
    _wait(lambda: len(calls) == 1)
    move_to(0.45)
    release.set()
    _wait(lambda: len(calls) >= 2)
    move_to(1.0)
    _wait(lambda: not sweeper.active)
    assert calls == [0.01, 0.45, 1.0]  # 0.01, one for 0.1-0.4, then 1.0
