"""Exactly-once under chaos: the Kafka -> txkafka -> Kafka pipeline crashed again and again.

The campaigns (integration_tests/chaos/) run the pipeline as a separate driver process while a
transactional producer feeds its input (some transactions aborted), SIGKILL the driver at every
writer injection point, at the reader's, and at random moments, bounce a broker of the 3-node
cluster, kill an executor JVM of a standalone Spark cluster mid-batch, and restart from the same
checkpoint each time. After every recovery no transaction begun before the crash may still be open;
at the end the output is verified read_committed (duplicates AND gaps) and no transaction of the
sink is open. The terminal summary prints what the campaigns proved (rounds, kills per point,
records verified).

The first tests show the verifier itself fails when it must (an injected duplicate, a gap, a
repeated or lost aggregation batch), so a passing campaign means something.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from integration_tests.chaos.campaign import Campaign, Crash, SparkTarget
from integration_tests.chaos.summary import (
    ALL_POINTS,
    CI_COVERAGE,
    CI_RESULTS,
    OPERATOR_STEPS,
    WRITER_POINTS,
    ChaosSummary,
    RoundRecord,
)
from integration_tests.conftest import native_kafka
from integration_tests.kafka_helpers import KafkaTarget, unique
from txkafka.connector.client.transactions import TransactionClient
from txkafka.embedded_kafka import EmbeddedKafka
from txkafka.verify import verify, verify_counts, verify_windowed_counts

pytestmark = [pytest.mark.kafka]


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txkafka", *args], capture_output=True, text=True,
                          timeout=timeout)


def _transaction_version(cluster: EmbeddedKafka) -> int:
    """The finalized transaction.version, from the controller's log (set when formatting)."""
    text = Path(cluster.node_infos[0].log_path).read_text(errors="replace")
    levels = [int(line.rsplit(" to ", 1)[1].split()[0]) for line in text.splitlines()
              if "setting feature transaction.version to" in line]
    return levels[-1] if levels else 0


@pytest.fixture(scope="module")
def kafka_tv0(tmp_path_factory) -> KafkaTarget:
    """A single node formatted with transaction.version=0 (the pre-KIP-890 transaction protocol)."""
    cluster = EmbeddedKafka("pytest-tv0", 1, root=tmp_path_factory.mktemp("kafka-tv0"),
                            transaction_version=0)
    yield from native_kafka(cluster, "the transaction.version=0 broker", timeout=240)


def _record(campaign: Campaign) -> None:
    """Every CI campaign goes into the printed summary, a failed one too (shown as FAILED)."""
    CI_RESULTS.append(campaign.result)


# Names of the CI campaigns whose test ran to its end and passed every check (the summary test
# counts only these: a campaign is recorded in CI_RESULTS before it has run).
_VERIFIED: set[str] = set()


def _mark_verified(campaign: Campaign) -> None:
    assert campaign.result.ok, campaign.result.problems()
    _VERIFIED.add(campaign.name)


def _assert_exactly_once(campaign: Campaign) -> None:
    """The campaign's verdict (summary.CampaignResult.problems owns the rules), and its parts
    spelt out, so a failure names the part that broke."""
    r = campaign.result
    summary = ChaosSummary([r], title=campaign.name).text()
    assert r.duplicates == 0 and r.missing == 0 and r.unexpected == 0, \
        f"{r.verify_text}\n{summary}"
    assert r.order_violations == 0, r.verify_text
    assert r.records_verified > 0, r.verify_text
    assert r.stale_open == 0, f"transactions of crashed runs still open after recovery\n{summary}"
    assert r.final_open == [], f"transactions of the sink left open: {r.final_open}"
    assert all(rec.stale_open == 0 for rec in r.rounds if rec.stale_open is not None), r.rounds
    assert r.stale_checks == len(r.rounds), f"unchecked recoveries: {r.rounds}"
    assert len(r.rounds) >= r.rounds_planned >= 1, r.rounds
    assert r.asked - r.landed() - set(r.optional) == set(), f"crashes asked for, not landed\n{summary}"
    # Only the sink's deliberate failure of a batch whose transaction came too close to its
    # timeout (a very slow machine), or one the test provoked, may stop a run.
    assert r.unexpected_failures() == [], f"the query failed instead of recovering\n{summary}"
    assert r.problems() == [] and r.ok, summary


# --------------------------------------------------------------------- the verifier can fail


def test_id_verifier_reports_an_injected_duplicate_and_a_gap(kafka, tmp_path):
    src = kafka.create_topic(partitions=2)
    dst = kafka.create_topic(partitions=2)
    ids = [(f"id-{i:05d}", f"v{i}") for i in range(300)]
    kafka.produce(src, ids, transactional=True)
    kafka.produce(src, [("aborted-1", "x")], transactional=True, commit=False)
    kafka.produce(dst, [(k, v + "|seen") for k, v in ids], transactional=True)
    conf = {"bootstrap.servers": kafka.bootstrap}
    good = verify(conf, src, dst)
    assert good.ok and good.expected == 300 and good.found == 300, good.text()

    kafka.produce(dst, [ids[17]])  # one record written twice
    dup = verify(conf, src, dst)
    assert (dup.duplicates, dup.missing, dup.ok) == (1, 0, False), dup.text()

    kafka.produce(src, [("id-late", "never processed")], transactional=True)  # a gap
    gap = verify(conf, src, dst)
    assert (gap.duplicates, gap.missing) == (1, 1), gap.text()
    assert "id-late" in gap.examples["missing"] and "id-00017" in gap.examples["duplicates"]

    out = _cli("verify", "-b", kafka.bootstrap, "--input", src, "--output", dst, "--json-out",
               str(tmp_path / "r.json"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAILED" in out.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["duplicates"] == 1 and report["missing"] == 1 and report["ok"] is False


def _fake_checkpoint(root: Path, topic: str, ends: list[int], watermarks: list[int] | None = None,
                     committed: int | None = None) -> Path:
    """Spark's offset and commit logs for batches ending at ``ends`` (one partition)."""
    for name in ("offsets", "commits"):
        (root / name).mkdir(parents=True, exist_ok=True)
    for b, end in enumerate(ends):
        wm = watermarks[b] if watermarks else 0
        (root / "offsets" / str(b)).write_text(f'v1\n{{"batchWatermarkMs":{wm}}}\n'
                                               f'{{"{topic}":{{"0":{end}}}}}')
        if committed is None or b <= committed:
            (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


def test_count_verifier_catches_a_repeated_batch_a_hidden_gap_and_an_aborted_leak(kafka, tmp_path):
    """Update mode re-emits a key whenever its count changes, so final counts alone cannot see a
    lost intermediate update; the offset log says exactly what each batch must emit."""
    src = kafka.create_topic(partitions=1)
    kafka.produce(src, [("a", "1"), ("b", "2"), ("a", "3"), ("c", "4")], transactional=True)
    kafka.produce(src, [("a", "x"), ("a", "y")], transactional=True, commit=False)  # aborted
    kafka.produce(src, [("a", "5"), ("b", "6"), ("d", "7")], transactional=True)
    # Offsets 0-3 and the commit marker 4 are batch 1; the aborted records (5, 6), their marker
    # (7), the last transaction (8-10) and its marker (11) are batch 2.
    end_first = 5
    end_all = kafka.end_offsets(src)[0]
    ck = _fake_checkpoint(tmp_path / "ck", src, [0, end_first, end_all])
    batch1 = [("a", "2"), ("b", "1"), ("c", "1")]
    batch2 = [("a", "3"), ("b", "2"), ("d", "1")]
    conf = {"bootstrap.servers": kafka.bootstrap}

    def check(updates: list[tuple[str, str]], checkpoint: Path | None = ck):
        dst = kafka.create_topic(partitions=1)
        kafka.produce(dst, updates)
        return verify_counts(conf, src, dst, checkpoint=str(checkpoint) if checkpoint else None)

    good = check(batch1 + batch2)
    assert good.ok and good.batches == 3 and good.expected_updates == 6, good.text()
    assert check(batch1 + batch2, None).ok

    repeated = check(batch1 + batch1 + batch2)  # batch 1 committed twice
    assert repeated.duplicates == 3 and not repeated.ok, repeated.text()

    hidden = [u for u in batch1 if u != ("a", "2")] + batch2  # a=2 lost, a=3 hides it
    assert check(hidden, None).ok  # the final counts are right...
    gap = check(hidden)            # ...but batch 1's update of "a" is missing
    assert gap.missing == 1 and gap.examples["missing"] == ["a=2"], gap.text()

    leak = check(batch1 + batch2 + [("a", "5")])  # the aborted records were counted
    assert leak.unexpected == 1 and not leak.ok, leak.text()
    assert not check(batch1 + batch2 + [("a", "5")], None).ok

    dst = kafka.create_topic(partitions=1)
    kafka.produce(dst, batch1 + batch1 + batch2)
    out = _cli("verify", "-b", kafka.bootstrap, "--input", src, "--output", dst, "--check",
               "counts", "--checkpoint", str(ck))
    assert out.returncode == 1 and "duplicates         3" in out.stdout, out.stdout + out.stderr


def test_transaction_client_asks_another_broker_when_a_pooled_connection_died(kafka):
    """Found by the broker rounds: after a broker died, the driver's pooled connection to it was
    reused for FindCoordinator and the commit failed with "broker closed the connection" instead
    of asking a live broker (the query stopped although two brokers of three were up)."""
    topic = kafka.create_topic(partitions=1)
    tid = unique("chaos-stale")
    producer = kafka.producer(tid)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"v", b"k")
    producer.flush(30)
    try:
        with TransactionClient(kafka.conf, timeout=20) as tc:
            for host, port in tc.bootstrap:
                tc._conn(host, port)._sock.shutdown(socket.SHUT_RDWR)  # what a dead broker leaves
            assert tc.describe([tid])[tid].state == "Ongoing"
            for conn in list(tc._conns.values()):
                conn._sock.shutdown(socket.SHUT_RDWR)
            assert [t.transactional_id for t in tc.list_transactions(prefix=tid)] == [tid]
    finally:
        producer.abort_transaction(30)


def test_windowed_count_verifier_catches_a_repeat_a_gap_and_a_leak(kafka, tmp_path):
    """The aggregation's check: every window the watermark closed is out once, with its count."""
    src = kafka.create_topic(partitions=1)
    t0 = int(time.time() * 1000) // 10_000 * 10_000
    kafka.produce(src, [("a", "1", 0, t0 + 100), ("a", "2", 0, t0 + 200), ("b", "3", 0, t0 + 300),
                        ("a", "4", 0, t0 + 1100)], transactional=True)
    kafka.produce(src, [("a", "x", 0, t0 + 150)] * 2, transactional=True, commit=False)
    kafka.produce(src, [("z", "5", 0, t0 + 5000)], transactional=True)
    end = kafka.end_offsets(src)[0]
    # Batch 1 (committed) closed the windows ending by t0 + 2000; batch 2 is not committed yet.
    ck = _fake_checkpoint(tmp_path / "ck", src, [0, end - 2, end], [0, t0 + 2000, t0 + 10_000],
                          committed=1)
    good = [(f"a@{t0}", "2"), (f"b@{t0}", "1"), (f"a@{t0 + 1000}", "1")]
    conf = {"bootstrap.servers": kafka.bootstrap}

    def check(updates: list[tuple[str, str]]):
        dst = kafka.create_topic(partitions=1)
        kafka.produce(dst, updates)
        return verify_windowed_counts(conf, src, dst, 1000, checkpoint=str(ck))

    ok = check(good)
    assert ok.ok and (ok.closed, ok.open, ok.input_records) == (3, 1, 4), ok.text()
    assert check(good + [(f"z@{t0 + 5000}", "1")]).ok  # the uncommitted batch 2 may be out
    repeated = check(good + good[:1])
    assert repeated.duplicates == 1 and not repeated.ok, repeated.text()
    gap = check(good[:1] + good[2:])
    assert gap.missing == 1 and gap.examples["missing"] == [f"b@{t0}"], gap.text()
    leak = check([(f"a@{t0}", "4")] + good[1:])  # the aborted records were counted
    assert leak.wrong_counts == 1 and not leak.ok, leak.text()

    dst = kafka.create_topic(partitions=1)
    kafka.produce(dst, good + good)
    out = _cli("verify", "-b", kafka.bootstrap, "--input", src, "--output", dst, "--check",
               "windowed-counts", "--window-ms", "1000", "--checkpoint", str(ck))
    assert out.returncode == 1 and "duplicates         3" in out.stdout, out.stdout + out.stderr


class _LeaderlessAdmin:
    """ListOffsets as librdkafka answers it while partition 0's leader is dead: -1001, no error."""

    def __init__(self, leaderless_calls: int) -> None:
        self.leaderless_calls = leaderless_calls
        self.calls = 0

    def list_offsets(self, specs, isolation_level=None, request_timeout=None):
        from concurrent.futures import Future

        self.calls += 1
        out = {}
        for tp in specs:
            fut: Future = Future()
            leaderless = tp.partition == 0 and self.calls <= self.leaderless_calls
            fut.set_result(type("Info", (), {"offset": -1001 if leaderless else 42})())
            out[tp] = fut
        return out


def test_offset_lookup_never_returns_librdkafkas_invalid_offset():
    """Found by the broker rounds: with a partition's leader down, librdkafka's ListOffsets
    answered -1001 (OFFSET_INVALID) without an error; the reader wrote it into Spark's offset log
    as the batch's end ("offsets went backwards from 343 to -1001"), failing the query and every
    restart of it. A leaderless answer is now asked again, and never returned as an offset."""
    from txkafka.connector.errors import OffsetsUnavailableError
    from txkafka.connector.source.offset_reader import KafkaOffsetReader
    from txkafka.connector.source.options import parse_source_options

    def reader(admin):
        options = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                        "fetchOffset.retryIntervalMs": "0",
                                        "kafka.socket.timeout.ms": "2000"}, streaming=True)
        return KafkaOffsetReader(options, admin_factory=lambda conf: admin)

    election = _LeaderlessAdmin(leaderless_calls=5)  # more than fetchOffset.numRetries (3)
    assert reader(election).latest_offsets([("t", 0), ("t", 1)]) == {("t", 0): 42, ("t", 1): 42}
    assert election.calls == 6
    with pytest.raises(OffsetsUnavailableError, match="no leader"):
        reader(_LeaderlessAdmin(leaderless_calls=10**6)).latest_offsets([("t", 0)])


@pytest.mark.parametrize("fetcher", ["wire", "librdkafka"])
def test_pooled_consumers_never_stall_and_read_every_range_exactly(kafka, fetcher):
    """Found by the soak: an executor's range read stalled for the whole pollTimeoutMs (no error)
    although the broker held its records; the batch's other transactions then timed out and the
    query failed. A pooled consumer had been paused when idle, then assigned to another offset and
    resumed: librdkafka's pause/assign/resume race (librdkafka #2190, #5591) left it never fetching,
    about once in 200 such re-assignments. Pooled consumers are now unassigned when idle and
    assigned once per range. Two pools (two Python workers) read 450 ranges, contiguous ones and
    jumps back and forth as Spark's replays and the scheduler produce them; each range must
    return exactly its committed records, at once. txkafka's own fetch (fetcher=wire) reads the
    same ranges: aborted transactions and markers at every position a range can start or end."""
    import random

    from txkafka.connector.source.range_reader import ConsumerPool, FetchTask, fetch_range
    from txkafka.connector.source.options import parse_source_options

    topic = kafka.create_topic(partitions=3)
    seq = 0
    for n in range(30):  # 3 partitions x ~1500 offsets, one transaction in four aborted
        kafka.produce(topic, [(f"k{seq + i}", "v") for i in range(200)], transactional=True,
                      commit=n % 4 != 3)
        seq += 200
    truth: dict[int, list[int]] = {}
    for r in kafka.read_all(topic):
        truth.setdefault(r.partition, []).append(r.offset)
    end_of = kafka.end_offsets(topic)
    options = parse_source_options({"kafka.bootstrap.servers": kafka.bootstrap,
                                    "subscribe": topic}, streaming=True)
    conf = tuple(sorted(options.consumer_config().items()))
    pools = [ConsumerPool(), ConsumerPool()]
    rng = random.Random(5)
    pos = {p: 0 for p in truth}
    try:
        for _ in range(150):
            for p in rng.sample(sorted(truth), len(truth)):
                if rng.random() < 0.1 or pos[p] + 100 > end_of[p]:
                    pos[p] = rng.randrange(0, end_of[p] - 100)  # a replay or another worker
                start, end = pos[p], pos[p] + rng.randint(20, 100)
                task = FetchTask(topic, p, start, end, conf, 10_000, True, False, fetcher)
                got = [o for b in fetch_range(task, rng.choice(pools))
                       for o in b.column("offset").to_pylist()]
                assert got == [o for o in truth[p] if start <= o < end], (p, start, end)
                pos[p] = end
    finally:
        for pool in pools:
            pool.close_all()


# --------------------------------------------------------------------------- the campaigns


def _ci_campaign(name: str, kafka: KafkaTarget, mode: str, tmp_path: Path, **kw) -> Campaign:
    """A campaign sized for CI: crash in the first batch after each restart (the re-run of the
    crashed batch), a modest feed, big catch-up batches."""
    kw = {"batch_deltas": (1,), "records_per_txn": 30, "feed_interval_s": 0.4,
          "max_offsets": 3000, **kw}
    campaign = Campaign(name, kafka, mode, tmp_path, **kw)
    _record(campaign)
    return campaign


@pytest.mark.timeout(1800)  # bounded inside by per-round timeouts
def test_chaos_map_on_three_brokers(kafka3, tmp_path):
    """Stateless map, transaction.version 2, local Spark: the driver killed at both task-side
    writer points, before and after the decision, during the recovery of that decision, and at a
    random time after a broker was killed and restarted mid-run; a reader task's worker crashed.
    Then operator actions: the newest batch rolled back with new input
    (CheckpointMismatchError), the removed files restored and the next run on one task per
    input partition's records (coalesce 1: continues, until a random kill); a savepoint of that
    killed query, and a changed query (another projection, an order-keeping layout) on a new
    checkpoint as the final run. One verification spans both checkpoints' output."""
    assert _transaction_version(kafka3.cluster) == 2
    campaign = _ci_campaign("map-tv2-3brokers", kafka3, "map", tmp_path, transaction_version=2,
                            seed=11)
    campaign.run([
        Crash("point", "before_precommit"),
        Crash("point", "after_precommit", task_exit="read_partition"),
        Crash("point", "before_decision"),
        Crash("point", "after_decision"),
        Crash("point", "during_recovery"),
        Crash("broker"),
        Crash("rollback", None, how="restore", layout="coalesce-1"),
        Crash("savepoint", how="stopped", last=True),
    ])
    _assert_exactly_once(campaign)
    r = campaign.result
    assert r.broker_bounces == 1 and r.random_kills == 2  # the broker's, the restored run's
    assert r.task_crashes_by_point == {"read_partition": 1}, r.rounds
    assert set(r.operator_steps) == {"rollback-refused", "rollback-restored", "relayout",
                                     "savepoint-moved"}, r.rounds
    assert r.checkpoints == 2 and not r.order_note, r
    _mark_verified(campaign)


@pytest.mark.timeout(1800)  # bounded inside by per-round timeouts
def test_chaos_aggregate_on_a_standalone_cluster(kafka3, spark_cluster, tmp_path):
    """A count per (key, event-time window) in append mode (state in Spark's state store) on
    executors in separate JVMs: an executor killed while a task pre-commits, then the driver
    killed after the sink's commit (the kill between two EndTxn calls is in the timeout test).
    The sink writes through txkafka's own producer, the default, as in the map campaign (whose
    broker kill is a leader kill under it); the transaction-timeout campaign through librdkafka."""
    campaign = _ci_campaign("aggregate-tv2-standalone-wire", kafka3, "aggregate", tmp_path,
                            spark=SparkTarget.on_cluster(spark_cluster), transaction_version=2,
                            seed=12, round_timeout=300)
    campaign.run([Crash("executor", "after_sink_commit")])
    _assert_exactly_once(campaign)
    assert campaign.result.executor_kills == 1
    assert campaign.result.open_windows <= 1, campaign.result.verify_text
    _mark_verified(campaign)


@pytest.mark.timeout(1800)  # bounded inside by per-round timeouts
def test_transaction_timeout_recovers_exactly_the_lost_partitions(kafka_tv0, tmp_path):
    """Invariant 8. (1) The driver dies between two EndTxn calls and stays down longer than
    transaction.timeout.ms: the broker aborts the rest of the decided batch; the restart re-writes
    exactly those task partitions (round 1 of the batch). (2) A commit slower than the timeout
    while the driver lives: the query stops with TransactionLostError naming the batch, task
    partitions, topic partitions and source offsets. Then the newest committed batch is rolled
    back with the input unchanged and the operator restarts with more tasks: that run skips the
    re-planned batch (logged) and is refused with TaskLayoutChangedError at the lost batch (the
    campaign's rollback and relayout steps); the old layout re-writes it in the final run.
    On a transaction.version=0 broker (the pre-KIP-890 protocol; the campaigns above run tv 2)."""
    assert _transaction_version(kafka_tv0.cluster) == 0
    timeout_ms = 15000  # small, yet above a batch's duration on a busy 2-core machine
    campaign = _ci_campaign("transaction-timeout-tv0", kafka_tv0, "map", tmp_path,
                            transaction_version=0, seed=14, max_offsets=240,
                            transaction_timeout_ms=timeout_ms, records_per_txn=40,
                            producer="librdkafka")  # the one campaign on the other producer
    campaign.plan(5)  # (1), (2), the rollback and the relayout's two runs (the last one final)
    try:
        campaign.start(feed=False, initial_transactions=24)
        campaign.feeder.stop()
        ck = campaign.ck

        # (1) killed between the EndTxn calls of batch 2, down until the broker aborted the rest.
        fired = campaign.markers / "between.fired"
        before, round_started = campaign.commit_ids(), time.monotonic()
        driver = campaign.launch(fault=f"point=between_endtxn,batch=2,action=kill,once={fired}")
        code = campaign.wait_exit(driver, campaign.round_timeout, "kill between EndTxn calls")
        assert code == -9 and fired.exists(), driver.tail()
        campaign.result.kills_by_point["between_endtxn"] = 1
        campaign.record_round(RoundRecord(
            1, "point:between_endtxn", "killed at between_endtxn", max(before, default=-1),
            campaign.committed(), round(time.monotonic() - round_started, 1),
            asked=["kill:between_endtxn"], landed=["kill:between_endtxn"]),
            before, campaign._fired_at_ms(fired))
        state = campaign.commit_log().latest()
        assert state.batch_id == 2 and state.pending is not None, state
        decided = state.pending.decision
        assert len(decided) >= 2, decided
        ended = campaign.wait_aborted_by_broker(decided[1:], timeout=60)
        # The broker (nobody else: the driver is dead) aborted them, and only once their
        # transaction.timeout.ms had run out; the restart below comes after that.
        for tid, (final, tx_timeout, abortable_at, seen_at) in ended.items():
            assert final in ("PrepareAbort", "CompleteAbort"), (tid, final)
            assert tx_timeout == timeout_ms, (tid, tx_timeout)
            assert abortable_at is not None and seen_at >= abortable_at, \
                (tid, abortable_at, seen_at)

        # (2) restart: recovers batch 2; batch 4's commit then sleeps past the timeout.
        slept = campaign.markers / "slow-commit.fired"
        before, round_started = campaign.commit_ids(), time.monotonic()
        driver = campaign.launch(
            fault=f"point=after_decision,batch=4,action=sleep,ms={timeout_ms + 5000},once={slept}")
        code = campaign.wait_exit(driver, campaign.round_timeout, "slow commit of batch 4")
        out = driver.output()
        assert code == 2 and slept.exists(), driver.tail()
        assert "broker aborted" in out and "batch 2" in out, driver.tail()  # recovery said so
        failed = next(ln for ln in out.splitlines()
                      if ln.startswith("txkafka.connector.errors.TransactionLostError: "))
        assert "batch 4" in failed and "task partition" in failed and "source offsets" in failed \
            and campaign.source in failed, failed
        # The one query failure this test provokes on purpose.
        campaign.result.query_failures.append(failed[:300])
        campaign.result.expected_failures.append(failed[:300])
        campaign.record_round(RoundRecord(
            2, "slow-commit:after_decision", f"failed: {failed[:300]}", max(before, default=-1),
            campaign.committed(), round(time.monotonic() - round_started, 1)),
            before, int(time.time() * 1000))

        shown = json.loads(_cli("commit-log", "show", "--checkpoint", str(ck), "--json").stdout)
        batches = {b["batch"]: b for b in shown["batches"]}
        b2 = batches[2]
        assert b2["status"] == "complete" and len(b2["rounds"]) == 2, b2
        lost2 = sorted(b2["rounds"][0]["lost"])
        assert lost2 == sorted(c.partition_id for c in decided[1:]), (b2, decided)
        # Round 1 of batch 2 re-wrote exactly the lost task partitions, nothing else.
        log = campaign.commit_log()
        assert sorted(c.partition_id for c in log.batch_state(2).rounds[1].decision) == lost2
        assert batches[4]["status"].startswith("lost partitions"), batches[4]
        text = _cli("commit-log", "show", "--checkpoint", str(ck)).stdout
        assert "lost" in text

        # The newest committed batch (3) rolled back, the input unchanged; the operator then
        # restarts with more tasks while batch 4 waits for its re-write. That run re-plans batch
        # 3 with the same offsets (skipped, logged), then is refused at batch 4 with
        # TaskLayoutChangedError, nothing of it committed. (3) The old layout re-writes batch
        # 4's lost partitions as its round 1 and catches up: the relayout step's last run is
        # the final run.
        assert campaign.roll_back_unchanged() == 3
        campaign.round(Crash("relayout", how="split-6", last=True))
        assert [rec.observed for rec in campaign.result.rounds[-3:]] == \
            ["rollback-skipped", "relayout-refused", "layout-restored"], \
            campaign.result.rounds[-3:]
        b4 = log.batch_state(4)
        assert b4.complete and len(b4.rounds) == 2, b4
        assert sorted(c.partition_id for c in b4.rounds[1].decision) == \
            sorted(c.partition_id for c in b4.rounds[0].lost)
        r = campaign.conclude()
        _assert_exactly_once(campaign)
        assert r.rerun_rounds == 2, r  # batches 2 and 4
        assert r.records_verified == campaign.feeder.stats.records_committed, r.verify_text
        _mark_verified(campaign)
    finally:
        campaign.close()


def test_chaos_summary_covers_every_injection_point():
    """The CI campaigns together: at least 10 crash points, every injection point hit."""
    recorded = list(CI_RESULTS)
    everything = ChaosSummary(recorded, title="txkafka chaos (CI, every campaign recorded)")
    every = everything.totals()
    # A campaign that failed (or never finished) fails the summary too.
    assert every["all_ok"] and every["failed_campaigns"] == [], everything.text()
    unverified = [c.name for c in recorded if c.name not in _VERIFIED]
    assert unverified == [], f"campaigns recorded but not verified: {unverified}"
    # Coverage is counted over the verified campaigns only. The summary's verdict owns the
    # coverage rules (CI_COVERAGE); the asserts below spell them out.
    summary = ChaosSummary([c for c in recorded if c.name in _VERIFIED], title="txkafka chaos (CI)",
                           coverage=CI_COVERAGE)
    totals = summary.totals()
    print(summary.text())
    assert totals["campaigns"] >= 1, "no verified campaign ran in this session"
    assert totals["coverage_problems"] == [], summary.text()
    assert totals["all_ok"] and totals["failed_campaigns"] == [], summary.text()
    assert totals["crash_points"] >= 10, summary.text()
    assert totals["points_not_hit"] == [], summary.text()
    # Every writer point crashed the driver itself (SIGKILL of its whole session).
    assert set(WRITER_POINTS) <= set(totals["kills_by_point"]), summary.text()
    assert set(ALL_POINTS) <= set(totals["kills_by_point"]) | set(totals["task_crashes_by_point"])
    assert totals["duplicates"] == totals["missing"] == totals["unexpected"] == \
        totals["order_violations"] == 0, summary.text()
    assert set(totals["modes"]) == {"map", "aggregate"}
    assert set(totals["transaction_versions"]) == {0, 2}
    assert "standalone" in totals["spark"] and totals["executor_kills"] >= 1
    assert totals["broker_bounces"] >= 1
    # Every operator step showed its outcome, with its evidence, at least once.
    assert set(OPERATOR_STEPS) <= set(totals["operator_steps"]), summary.text()
