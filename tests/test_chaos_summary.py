"""The chaos verdicts need evidence: a campaign, a soak and the CI summary each FAIL on an empty or
fault-free run and pass on a good one; fault rounds count only when they landed (no Kafka, no
Spark: results built by hand, processes faked)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from integration_tests.chaos import campaign as campaign_mod
from integration_tests.chaos import soak
from integration_tests.chaos.campaign import (
    EXECUTOR_SLEEP_MS,
    LAYOUTS,
    Campaign,
    CampaignError,
    Crash,
    _ancestor_in,
)
from integration_tests.chaos.soak import _verified_rounds
from integration_tests.chaos.summary import (
    ALL_POINTS,
    CI_COVERAGE,
    OPERATOR_STEPS,
    WRITER_POINTS,
    CampaignResult,
    ChaosSummary,
    RoundRecord,
)


def _round(n: int, crash: Crash, outcome: str = "killed") -> RoundRecord:
    return RoundRecord(n, crash.label(), outcome, n - 1, n, 1.0, stale_open=0,
                       asked=crash.targets(), landed=crash.targets())


def _good(name: str = "c", crashes: tuple[Crash, ...] = (Crash("point", "before_decision"),),
          mode: str = "map", transaction_version: int = 2, spark: str = "local") -> CampaignResult:
    """A campaign with evidence for every crash it asked for and a clean verification."""
    c = CampaignResult(name, mode, transaction_version, 3, spark, rounds_planned=len(crashes))
    for i, crash in enumerate(crashes):
        c.rounds.append(_round(i + 1, crash))
        for target in crash.targets():
            kind, _, point = target.partition(":")
            if kind == "kill":
                c.kills_by_point[point] = c.kills_by_point.get(point, 0) + 1
            elif kind == "task-exit":
                c.task_crashes += 1
                c.task_crashes_by_point[point] = c.task_crashes_by_point.get(point, 0) + 1
            elif kind == "random":
                c.random_kills += 1
            elif kind == "executor":
                c.executor_kills += 1
            elif kind == "broker":
                c.broker_bounces += 1
    c.stale_checks = len(crashes)
    c.records_verified, c.updates_verified = 500, 500
    c.feeder = {"transactions_failed": 0, "records_committed": 500}
    return c


# --------------------------------------------------------------------------- one campaign


def test_a_good_campaign_is_ok():
    c = _good()
    assert c.problems() == [] and c.ok


def test_an_empty_campaign_fails():
    c = CampaignResult("empty", "map", 2, 3, "local")
    assert not c.ok
    text = " | ".join(c.problems())
    assert "no round planned" in text and "nothing verified" in text, text


def test_a_campaign_that_ran_fewer_rounds_than_planned_fails():
    c = _good()
    c.rounds_planned = 3
    assert c.problems() == ["ran 1 of 3 planned rounds"]


def test_a_campaign_whose_rounds_all_ended_in_designed_query_failures_fails():
    """The sink's designed failure is a correct outcome, but it is not the crash asked for."""
    crash = Crash("point", "after_decision")
    c = _good(crashes=())
    c.rounds_planned = 2
    for n in (1, 2):
        reason = "TransactionError: ... too close to its timeout, so none is committed"
        c.rounds.append(RoundRecord(n, crash.label(), f"failed: {reason}", 0, 0, 1.0, 0,
                                    asked=crash.targets()))
        c.query_failures.append(f"round {n}: {reason}")
    assert c.unexpected_failures() == []
    assert c.problems() == ["asked for but never landed: kill:after_decision"]


def test_a_point_not_hit_fails_unless_declared_optional_with_a_reason():
    c = _good(crashes=(Crash("point", "before_decision", task_exit="read_partition"),))
    c.task_crashes, c.task_crashes_by_point = 0, {}
    assert c.problems() == ["asked for but never landed: task-exit:read_partition"]
    c.optional["task-exit:read_partition"] = "rides along the round's crash"
    assert c.ok


def test_a_campaign_that_verified_no_record_fails():
    c = _good()
    c.records_verified = c.updates_verified = 0
    c.feeder = {}
    assert c.problems() == ["nothing verified: 0 input records, 0 output records checked"]
    c.records_verified = 10  # input verified, but no output record checked
    assert not c.ok


@pytest.mark.parametrize("change, problem", [
    (lambda c: setattr(c, "duplicates", 1), "output not exactly once"),
    (lambda c: setattr(c, "missing", 2), "output not exactly once"),
    (lambda c: c.final_open.append("txkafka-x-0 Ongoing"), "open at the end"),
    (lambda c: setattr(c, "stale_open", 1), "still open after recovery"),
    (lambda c: setattr(c.rounds[0], "stale_open", None), "recovery never checked"),
    (lambda c: c.query_failures.append("round 1: KafkaException: boom"), "the query failed"),
    (lambda c: c.errors.append("the verifier raised SystemExit: error: topic 't' not found"),
     "error: the verifier raised SystemExit"),
    (lambda c: c.feeder.update(records_committed=501), "the feeder committed 501"),
])
def test_each_fault_fails_the_campaign(change, problem):
    c = _good()
    change(c)
    assert not c.ok
    assert any(problem in p for p in c.problems()), c.problems()


def test_a_failure_provoked_on_purpose_is_allowed_only_when_declared():
    c = _good()
    c.query_failures.append("TransactionLostError: batch 4 lost")
    assert not c.ok
    c.expected_failures.append("TransactionLostError: batch 4 lost")
    assert c.ok


def test_the_verdict_is_derived_again_from_a_json_record():
    c = _good(crashes=(Crash("broker"), Crash("executor", "after_sink_commit")))
    data = json.loads(json.dumps(c.to_json()))
    assert data["ok"] is True and data["problems"] == []
    data["duplicates"] = 3  # a record edited (or written by a buggy run) after its verdict
    back = CampaignResult.from_json(data)
    assert not back.ok and back.rounds[0].asked == ["broker", "random"]


def test_crash_targets_name_what_each_round_asks_for():
    assert Crash("point", "after_decision").targets() == ["kill:after_decision"]
    assert Crash("random", task_exit="read_partition").targets() == [
        "random", "task-exit:read_partition"]
    assert Crash("broker").targets() == ["broker", "random"]
    assert Crash("executor").targets() == ["executor", "random"]
    assert Crash("executor", "before_decision").targets() == ["executor", "kill:before_decision"]


# --------------------------------------------------------------- a set of campaigns (soak)


def _campaign(name: str, rounds: int, ok: bool) -> CampaignResult:
    c = _good(name, tuple(Crash("point", "before_decision") for _ in range(rounds)))
    if not ok:
        c.missing = 1
    return c


def test_a_summary_of_no_campaign_fails():
    s = ChaosSummary([], title="t")
    assert s.totals()["all_ok"] is False
    assert "FAILED" in s.text() and "no campaign ran" in s.text()


def test_a_failed_campaign_is_recorded_but_its_rounds_do_not_count():
    s = ChaosSummary([_campaign("a", 10, True), _campaign("b", 6, False), _campaign("c", 4, True)],
                     title="t")
    t = s.totals()
    assert t["rounds"] == 20
    assert t["verified_rounds"] == 14 == _verified_rounds(s)
    assert t["failed_campaigns"] == ["b"]
    assert t["all_ok"] is False
    assert "rounds 20 (14 in verified campaigns)" in s.text()
    assert "output not exactly once" in s.text()  # the failed campaign says why


def test_a_campaign_in_progress_does_not_count_until_it_verifies():
    running = _good("d", tuple(Crash("random") for _ in range(3)))
    running.records_verified = running.updates_verified = 0  # not verified yet
    running.feeder = {}
    assert _verified_rounds(ChaosSummary([running], title="t")) == 0
    assert CampaignResult("e", "map", 2, 1, "local").ok is False


# ------------------------------------------------------------------------- operator steps


def _operator(steps: tuple[tuple[list[str], str], ...] = tuple(
        ([s], s) for s in OPERATOR_STEPS)) -> CampaignResult:
    """A campaign of operator-step rounds: (the outcomes each accepts, the one it showed)."""
    c = _good("operator", ())
    c.rounds_planned = len(steps)
    for expected, observed in steps:
        c.rounds.append(RoundRecord(len(c.rounds) + 1, "step", f"{observed} (evidence)", 0, 1, 1.0,
                                    stale_open=0, expected=expected, observed=observed))
        if observed in expected:
            c.operator_steps[observed] = c.operator_steps.get(observed, 0) + 1
    c.stale_checks = len(steps)
    return c


def test_operator_steps_that_showed_their_expected_outcomes_are_ok():
    c = _operator()
    assert c.problems() == [], c.problems()
    assert {f"op:{s}" for s in OPERATOR_STEPS} <= c.landed()


@pytest.mark.parametrize("expected, observed, problem", [
    # a redo was pending: the changed layout must be refused, a re-run that continued is a
    # partial re-write
    (["relayout-refused"], "relayout", "expected relayout-refused, observed relayout"),
    # no evidence for either accepted outcome (a rolled-back batch re-written without a word)
    (["rollback-skipped", "rollback-refused"], "",
     "expected rollback-skipped or rollback-refused, observed nothing"),
    (["savepoint-moved"], "", "expected savepoint-moved, observed nothing"),
])
def test_an_operator_step_without_its_expected_outcome_fails(expected, observed, problem):
    c = _operator(((expected, observed),))
    assert not c.ok
    assert any(problem in p for p in c.problems()), c.problems()


def test_a_failure_an_operator_step_provokes_is_allowed_only_when_it_showed_the_step():
    c = _operator(((["relayout-refused"], "relayout-refused"),))
    failure = "round 1: TaskLayoutChangedError: batch 3: the broker aborted ..."
    c.query_failures.append(failure)
    assert any("failed instead of recovering" in p for p in c.problems())
    c.expected_failures.append(failure)
    assert c.ok, c.problems()


def test_the_layouts_a_relayout_switches_between_leave_distinct_evidence():
    """A decision's task partition count tells which layout ran: never two at once."""
    for mode, layouts in LAYOUTS.items():
        for tasks in range(12):
            shown = [lay.name for lay in layouts if lay.shows_in(tasks, mode, 3)]
            assert len(shown) <= 1, (mode, tasks, shown)
        assert all(any(lay.shows_in(t, mode, 3) for t in range(12)) for lay in layouts)


def test_a_rollback_removes_the_newest_committed_batch_and_later_offsets(tmp_path):
    campaign = _bare_campaign(tmp_path)
    for folder, ids in (("offsets", range(5)), ("commits", range(4))):
        (tmp_path / "ck" / folder).mkdir(parents=True)
        for b in ids:
            (tmp_path / "ck" / folder / str(b)).write_text(f"{folder} {b}")
            (tmp_path / "ck" / folder / f".{b}.crc").write_text("crc")
    newest, kept = campaign.roll_back()
    assert newest == 3
    assert sorted(f"{f.parent.name}/{f.name}" for f in kept) == [
        "commits/.3.crc", "commits/3", "offsets/.3.crc", "offsets/.4.crc", "offsets/3",
        "offsets/4"]
    assert campaign.commit_ids() == {0, 1, 2}
    assert sorted(p.name for p in (tmp_path / "ck" / "offsets").iterdir()) == [
        ".0.crc", ".1.crc", ".2.crc", "0", "1", "2"]
    assert kept[tmp_path / "ck" / "offsets" / "4"] == b"offsets 4"


def test_savepoint_steps_are_refused_in_aggregation_campaigns(tmp_path):
    kafka = SimpleNamespace(cluster=None, conf={}, bootstrap="127.0.0.1:1")
    campaign = Campaign("unit", kafka, "aggregate", tmp_path, log=lambda msg: None)
    with pytest.raises(ValueError, match="no aggregation state"):
        campaign.round(Crash("savepoint", "after_decision"))


# ------------------------------------------------------------------------- the CI summary


def _ci_campaigns() -> list[CampaignResult]:
    """What the CI suite's three campaigns prove when every crash lands."""
    chaos_map = _good("map", (
        Crash("point", "before_precommit"),
        Crash("point", "after_precommit", task_exit="read_partition"),
        Crash("point", "before_decision"), Crash("point", "after_decision"),
        Crash("point", "during_recovery"), Crash("broker")))
    aggregate = _good("aggregate", (Crash("executor", "after_sink_commit"),), mode="aggregate",
                      spark="standalone")
    timeout = _good("timeout", (Crash("point", "between_endtxn"),), transaction_version=0)
    return [chaos_map, aggregate, timeout, _operator()]


def test_the_ci_summary_passes_with_every_point_hit():
    s = ChaosSummary(_ci_campaigns(), title="ci", coverage=CI_COVERAGE)
    t = s.totals()
    assert t["coverage_problems"] == [] and t["all_ok"], s.text()
    assert set(WRITER_POINTS) <= set(t["kills_by_point"])
    assert set(ALL_POINTS) <= set(t["kills_by_point"]) | set(t["task_crashes_by_point"])


def test_the_ci_summary_fails_on_fault_free_or_partial_runs():
    # Fault-free: every campaign verified records, but nothing was crashed.
    quiet = [_good(c.name, (), c.mode, c.transaction_version, c.spark) for c in _ci_campaigns()]
    for c in quiet:
        c.rounds_planned = 1
    s = ChaosSummary(quiet, title="ci", coverage=CI_COVERAGE)
    t = s.totals()
    assert not t["all_ok"], s.text()
    assert any("injection points not hit" in p for p in t["coverage_problems"])
    assert t["failed_campaigns"] == ["map", "aggregate", "timeout", "operator"]  # 0 of 1 rounds
    assert any("operator steps never shown" in p for p in t["coverage_problems"])
    # Every campaign ok, but the executor round's kill did not count: coverage fails.
    partial = _ci_campaigns()
    agg = partial[1]
    agg.executor_kills = 0
    agg.optional["executor"] = "declared optional for this test"
    s = ChaosSummary(partial, title="ci", coverage=CI_COVERAGE)
    assert s.totals()["failed_campaigns"] == []
    assert s.totals()["coverage_problems"] == ["0 executor kills, fewer than 1"], s.text()
    assert "coverage not met: 0 executor kills" in s.text()


# ------------------------------------------------------------------------------- the soak


class _FakeClusters:
    def __init__(self, root):
        self.spark = SimpleNamespace(master_url="spark://127.0.0.1:1")

    def start(self):
        pass

    def kafka(self, name):
        return SimpleNamespace(cluster=SimpleNamespace(node_infos=[1, 2, 3]))

    def stop(self):
        pass


def _fake_campaign(made: list, on_round=None, on_finish=None):
    class FakeCampaign:
        def __init__(self, name, kafka, mode, workdir, **kw):
            self.name = name
            self.result = CampaignResult(name, mode, kw["transaction_version"], 3, "local",
                                         producer=kw.get("producer", "librdkafka"))
            self.closed = False
            made.append(self)

        def plan(self, rounds, optional=None):
            self.result.rounds_planned = rounds
            self.result.optional.update(optional or {})

        def start(self):
            pass

        def round(self, crash):
            if on_round:
                on_round(self)
            crash = Crash("point", "before_decision")
            self.result.rounds.append(_round(len(self.result.rounds) + 1, crash))
            self.result.kills_by_point["before_decision"] = len(self.result.rounds)

        def finish(self):
            if on_finish:
                on_finish(self)
            self.result.stale_checks = len(self.result.rounds)
            self.result.records_verified = self.result.updates_verified = 100

        def close(self):
            self.closed = True

    return FakeCampaign


def _soak(monkeypatch, tmp_path, campaign_cls, *args: str) -> tuple[int, dict]:
    monkeypatch.setattr(soak, "Clusters", _FakeClusters)
    monkeypatch.setattr(soak, "Campaign", campaign_cls)
    monkeypatch.setattr(soak, "choose_crash", lambda rng, campaign, nodes: None)
    out = tmp_path / "soak.json"
    code = soak.main(["--out", str(out), "--workdir", str(tmp_path / "w"), "--seed", "7", *args])
    return code, json.loads(out.read_text())


def test_a_soak_of_good_campaigns_passes(monkeypatch, tmp_path):
    code, data = _soak(monkeypatch, tmp_path, _fake_campaign([]), "--rounds", "4",
                       "--rounds-per-campaign", "2")
    assert code == 0 and data["totals"]["all_ok"] is True, data["totals"]
    assert data["totals"]["verified_rounds"] == 4


def test_a_soak_with_both_producers_alternates_them_by_campaign(monkeypatch, tmp_path):
    code, data = _soak(monkeypatch, tmp_path, _fake_campaign([]), "--rounds", "3",
                       "--rounds-per-campaign", "1", "--producer", "both")
    assert code == 0, data["totals"]
    assert [c["producer"] for c in data["campaigns"]] == ["librdkafka", "txkafka", "librdkafka"]
    assert data["campaigns"][1]["name"].endswith("-wire")
    # A record written before the field existed reads back as librdkafka's.
    old = {k: v for k, v in data["campaigns"][0].items() if k != "producer"}
    assert CampaignResult.from_json(old).producer == "librdkafka"


def test_a_soak_whose_verifier_exits_fails_and_keeps_the_campaign_with_its_error(monkeypatch,
                                                                               tmp_path):
    """SystemExit (the verifier's "topic not found") used to escape the soak's handler: the
    campaign was dropped from the JSON, which could still say all_ok."""
    made: list = []

    def metadata_error(campaign):
        if len(made) == 1:
            raise SystemExit("error: topic 'out' not found (no metadata)")

    code, data = _soak(monkeypatch, tmp_path, _fake_campaign(made, on_finish=metadata_error),
                       "--rounds", "2", "--rounds-per-campaign", "1")
    assert code == 1 and data["totals"]["all_ok"] is False, data["totals"]
    first = data["campaigns"][0]
    assert first["ok"] is False and "topic 'out' not found" in " ".join(first["errors"]), first
    assert data["totals"]["failed_campaigns"] == [first["name"]]
    assert any("topic 'out' not found" in e for e in data["meta"]["errors"])


def test_a_soak_of_crash_free_campaigns_fails(monkeypatch, tmp_path):
    """Rounds that all ended in query failures (no crash landed) prove nothing."""
    made: list = []

    class NoCrash(_fake_campaign(made)):
        def round(self, crash):
            crash = Crash("point", "after_decision")
            n = len(self.result.rounds) + 1
            self.result.rounds.append(RoundRecord(n, crash.label(), "failed: x so none is", 0, 0,
                                                  1.0, 0, asked=crash.targets()))
            self.result.query_failures.append(f"round {n}: x so none is")

    code, data = _soak(monkeypatch, tmp_path, NoCrash, "--rounds", "2", "--rounds-per-campaign",
                       "2", "--max-hours", "0.0001")
    assert code == 1 and data["totals"]["all_ok"] is False
    assert "never landed: kill:after_decision" in " ".join(data["campaigns"][0]["problems"])


def test_a_campaign_cut_short_by_the_end_of_a_sitting_is_dropped_whole(tmp_path, monkeypatch):
    """Ctrl-C during a campaign ends the sitting: the campaigns verified before it stay in the
    JSON, the interrupted one (never verified) is not recorded, so --resume can go on."""
    made: list = []

    def interrupt(campaign):
        if len(made) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _soak(monkeypatch, tmp_path, _fake_campaign(made, on_round=interrupt), "--rounds", "5",
              "--rounds-per-campaign", "1")
    data = json.loads((tmp_path / "soak.json").read_text())
    assert [c["name"] for c in data["campaigns"]] == [made[0].name]
    assert data["totals"]["all_ok"] is True and data["totals"]["failed_campaigns"] == []
    assert made[1].closed  # its drivers and feeder do not outlive the sitting


# ---------------------------------------------------------------------------- fault rounds


def _bare_campaign(tmp_path: Path, cluster=None, standalone=None) -> Campaign:
    kafka = SimpleNamespace(cluster=cluster, conf={}, bootstrap="127.0.0.1:1")
    spark = campaign_mod.SparkTarget("spark://x", standalone) if standalone else None
    return Campaign("unit", kafka, "map", tmp_path, spark=spark, log=lambda msg: None)


class _FakeCluster:
    def __init__(self, down: tuple[int, ...] = (), stays_down: bool = False) -> None:
        self.node_infos = [SimpleNamespace(node_id=i) for i in (1, 2, 3)]
        self.down = set(down)
        self.stays_down = stays_down
        self.killed: list[int] = []

    def alive_nodes(self) -> list[int]:
        return [n.node_id for n in self.node_infos if n.node_id not in self.down]

    def kill_node(self, node: int) -> None:
        self.killed.append(node)
        self.down.add(node)

    def start_node(self, node: int) -> None:
        if not self.stays_down:
            self.down.discard(node)

    def wait_ready(self, timeout: float) -> None:
        pass


def _progressing(campaign: Campaign, monkeypatch) -> None:
    monkeypatch.setattr(campaign, "wait_progress", lambda driver, past, timeout, what: past + 1)
    monkeypatch.setattr(campaign, "_kill_unless_ended", lambda driver: 12345)
    monkeypatch.setattr(campaign_mod.time, "sleep", lambda s: None)


def test_a_broker_bounce_counts_when_the_node_was_up_and_came_back(tmp_path, monkeypatch):
    campaign = _bare_campaign(tmp_path, _FakeCluster())
    _progressing(campaign, monkeypatch)
    assert campaign._broker_round(None, 0, "round 1") == (12345, True)
    assert campaign.result.broker_bounces == 1


def test_a_broker_bounce_on_a_node_already_down_is_refused(tmp_path, monkeypatch):
    cluster = _FakeCluster(down=(2,))
    campaign = _bare_campaign(tmp_path, cluster)
    _progressing(campaign, monkeypatch)
    with pytest.raises(CampaignError, match=r"broker nodes \[2\] were already down"):
        campaign._broker_round(None, 0, "round 1")
    assert cluster.killed == [] and campaign.result.broker_bounces == 0


def test_a_broker_bounce_whose_node_does_not_come_back_is_not_counted(tmp_path, monkeypatch):
    campaign = _bare_campaign(tmp_path, _FakeCluster(stays_down=True))
    _progressing(campaign, monkeypatch)
    assert campaign._broker_round(None, 0, "round 1") == (12345, False)
    assert campaign.result.broker_bounces == 0


_EXECUTOR = """
import subprocess, sys
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
worker.wait()
"""
_WORKER = """
from txkafka.connector.fault_injection import FaultInjector, parse_spec
FaultInjector(parse_spec("point=before_precommit,action=sleep,ms=60000,once={marker}")).check(
    "before_precommit", batch=7, partition=2, attempt=0)
"""


def test_the_executor_round_kills_the_jvm_running_the_task_in_pre_commit(tmp_path):
    """Two "executors"; the one whose child "worker" sleeps in pre-commit is killed, the other
    is left alone, and the kill counts."""
    marker = tmp_path / "slow"
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    busy = subprocess.Popen([sys.executable, "-c", _EXECUTOR, _WORKER.format(marker=marker)])
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        standalone = SimpleNamespace(executor_pids=lambda: [idle.pid, busy.pid])
        campaign = _bare_campaign(tmp_path / "c", standalone=standalone)
        info = campaign._kill_executor(None, marker, "round 1")
        worker = info["pid"]
        assert info["victim"] == busy.pid and info["killed"], info
        assert busy.wait(30) == -signal.SIGKILL
        assert idle.poll() is None  # the other executor lives
        assert (info["batch"], info["partition"], info["attempt"]) == (7, 2, 0)
        proof = campaign._executor_kill_proof(info)
        assert proof and f"executor JVM {busy.pid} killed" in proof and "partition 2" in proof
    finally:
        for proc in (idle, busy):
            proc.kill()
            proc.wait()
        if worker:
            os.kill(worker, signal.SIGKILL)


def test_an_executor_kill_after_the_sleep_ended_is_not_made_nor_counted(tmp_path):
    executor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        marker = tmp_path / "slow"
        late = time.time() - EXECUTOR_SLEEP_MS / 1000 - 1
        marker.write_text(f"before_precommit {late} pid={executor.pid} batch=3 partition=0 "
                          "attempt=0\n")
        campaign = _bare_campaign(tmp_path / "c",
                                  standalone=SimpleNamespace(executor_pids=lambda: [executor.pid]))
        info = campaign._kill_executor(None, marker, "round 1")
        assert not info["killed"] and "left its pre-commit sleep" in info["note"], info
        assert campaign._executor_kill_proof(info) is None
        assert executor.poll() is None
    finally:
        executor.kill()
        executor.wait()


def test_a_task_in_no_executor_is_a_campaign_error(tmp_path):
    marker = tmp_path / "slow"
    marker.write_text(f"before_precommit {time.time()} pid={os.getpid()} batch=3 partition=0 "
                      "attempt=0\n")
    campaign = _bare_campaign(tmp_path / "c",
                              standalone=SimpleNamespace(executor_pids=lambda: [1]))
    with pytest.raises(CampaignError, match="runs in no executor JVM"):
        campaign._kill_executor(None, marker, "round 1")


def test_ancestor_lookup_walks_up_the_process_tree():
    assert _ancestor_in(os.getpid(), {os.getppid()}) == os.getppid()
    assert _ancestor_in(os.getpid(), {os.getpid()}) == os.getpid()
    assert _ancestor_in(os.getpid(), set()) is None


def test_a_verifier_that_exits_is_recorded_as_the_campaign_error(tmp_path, monkeypatch):
    campaign = _bare_campaign(tmp_path)

    def no_topic(*args, **kw):
        raise SystemExit("error: topic 'out' not found (no metadata)")

    monkeypatch.setattr(campaign_mod, "verify", no_topic)
    campaign.verify()
    r = campaign.result
    assert r.errors == ["the verifier raised SystemExit: error: topic 'out' not found (no "
                        "metadata)"]
    assert not r.ok and "not verified" in r.verify_text


def test_the_soak_never_aims_between_two_endtxn_calls_of_a_one_task_layout():
    """With one write task a batch has one transaction: a kill between two EndTxn calls would
    never land and the round would wait out its timeout (found by the soak after a relayout to
    coalesce-1)."""
    import random

    from integration_tests.chaos import campaign as chaos_campaign

    def drawn(layout: str) -> set[str]:
        lay = next(x for x in chaos_campaign.LAYOUTS["map"] if x.name == layout)
        fake = SimpleNamespace(spark=SimpleNamespace(kind="local"), mode="map", layout=lay,
                               pending_decision_size=lambda: 0, committed=lambda: 3)
        rng = random.Random(7)
        crashes = [soak.choose_crash(rng, fake, 3) for _ in range(3000)]
        return {c.point for c in crashes if c.point}

    assert "between_endtxn" in drawn("as-read")
    assert "between_endtxn" not in drawn("coalesce-1")
    assert "after_decision" in drawn("coalesce-1")
