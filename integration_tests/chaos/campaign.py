"""One chaos campaign: one pipeline (input, output, checkpoint) driven through many crashes.

A round is one driver run that ends in a crash:
- ``point``: the driver is SIGKILLed at a named injection point (TXKAFKA_FAULT_INJECTION,
  ``txkafka.pipeline --fault``, with ``action=kill``: every process of its session dies at once);
- ``random``: after the run made progress, SIGKILL at a random moment;
- ``broker``: one node of the 3-node cluster, up until then, is SIGKILLed mid-run, the pipeline
  must keep committing, the node is restarted (and must be up again), then the driver is killed at
  a random moment;
- ``executor`` (Spark standalone): a task sleeps in its pre-commit; the executor JVM running it
  (found from the pid its fault-injection marker records) is SIGKILLed before the sleep ends, then
  the driver is killed (at a point, or at random).
The next round's run restarts from the same checkpoint and must recover. Meanwhile a transactional
producer keeps feeding the input (with aborted transactions). A crash counts only with evidence that
it happened (a marker and exit -9, a kill of a live process); summary.py derives the verdict.

Checks:
- after every round's recovery (the next run committed a batch, which sweeps orphans): no
  transaction of the sink's prefix that started before the crash is still open;
- at the end (feeder stopped, a last run catches up): no open transaction of the sink at all, and
  the output verifies read_committed with zero duplicates and zero missing records (ids for the
  map, per-batch (key, count) updates for the aggregation).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from integration_tests.chaos.feeder import InputFeeder
from integration_tests.chaos.processes import PipelineDriver
from integration_tests.chaos.summary import (
    DESIGNED_FAILURE,
    WRITER_POINTS,
    CampaignResult,
    RoundRecord,
)
from integration_tests.kafka_helpers import KafkaTarget
from txkafka.connector.fault_injection import ENV_VAR, read_marker
from txkafka.connector.sink_commit_log import SinkCommitLog
from txkafka.connector.transaction_client import TransactionClient
from txkafka.verify import verify, verify_windowed_counts

TASK_POINTS = ("before_precommit", "after_precommit", "read_partition")
DRIVER_POINTS = tuple(p for p in WRITER_POINTS if p not in TASK_POINTS)
# A kill rule armed "at batch B or later": one rule per batch sharing one once-marker, so the
# kill still happens when batch B does not reach the point (no data there, one transaction only).
_BATCH_WINDOW = 40
# How long the executor round's task sleeps in pre-commit: the campaign must find and kill its
# executor meanwhile (a kill after the sleep ended is not counted); killed, the sleep costs nothing.
EXECUTOR_SLEEP_MS = 15000


class CampaignError(AssertionError):
    """A round did not behave (no crash, no progress, a wrong exit); carries the driver's log."""


@dataclass(frozen=True)
class Crash:
    """How a round ends."""

    kind: str                  # "point" | "random" | "broker" | "executor"
    point: str | None = None   # point: where; executor: the driver point killed after it (or random)
    task_exit: str | None = None  # also crash one task's Python worker at this task-side point

    def label(self) -> str:
        if self.kind == "point":
            text = f"point:{self.point}"
        elif self.kind == "executor":
            text = f"executor+{'point:' + self.point if self.point else 'random'}"
        else:
            text = self.kind
        return text + (f"+task-exit:{self.task_exit}" if self.task_exit else "")

    def targets(self) -> list[str]:
        """The crash targets (summary.py's vocabulary) this round asks for."""
        if self.kind == "point":
            out = [f"kill:{self.point}"]
        elif self.kind == "random":
            out = ["random"]
        elif self.kind == "broker":
            out = ["broker", "random"]
        else:
            out = ["executor", f"kill:{self.point}" if self.point else "random"]
        return out + ([f"task-exit:{self.task_exit}"] if self.task_exit else [])


@dataclass
class SparkTarget:
    """Where the drivers run Spark: local[2,4], or a standalone cluster (separate executor JVMs)."""

    master: str = "local[2,4]"
    standalone: object | None = None       # integration_tests.spark_standalone.SparkStandalone
    conf: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return "standalone" if self.standalone is not None else "local"

    @classmethod
    def on_cluster(cls, cluster) -> "SparkTarget":
        return cls(cluster.master_url, cluster, (
            "spark.executor.memory=640m", "spark.task.maxFailures=8",
            "spark.excludeOnFailure.enabled=false"))


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class _Pending:
    """Rounds whose recovery has not been checked yet, and the latest crash time among them."""

    rounds: list[RoundRecord] = field(default_factory=list)
    crash_ms: int = 0


class Campaign:
    def __init__(self, name: str, kafka: KafkaTarget, mode: str, workdir: Path, *,
                 spark: SparkTarget | None = None, transaction_version: int = 2, seed: int = 0,
                 trigger_ms: int = 300, max_offsets: int = 1000, round_timeout: float = 240.0,
                 final_timeout: float = 420.0, records_per_txn: int = 50,
                 feed_interval_s: float = 0.3, transaction_timeout_ms: int = 0,
                 input_partitions: int = 3, output_partitions: int = 3,
                 batch_deltas: tuple[int, ...] = (1, 2, 3),
                 log: Callable[[str], None] = _stderr) -> None:
        if mode not in ("map", "aggregate"):
            raise ValueError(f"mode must be map or aggregate, got {mode!r}")
        self.name = name
        self.kafka = kafka
        self.mode = mode
        self.workdir = Path(workdir)
        self.spark = spark or SparkTarget()
        self.rng = random.Random(seed)
        self.seed = seed
        self.trigger_ms = trigger_ms
        self.max_offsets = max_offsets
        self.round_timeout = round_timeout
        self.final_timeout = final_timeout
        self.transaction_timeout_ms = transaction_timeout_ms
        # An injected kill fires in batch committed + delta (or later): 1 is the re-run of the
        # crashed batch (cheapest), larger deltas let the pipeline progress between crashes.
        self.batch_deltas = batch_deltas
        self.window_ms = 2000       # aggregate: event-time windows of 10 feeder transactions
        self.watermark_ms = 10000   # ... closed 50 transactions later
        self.log = log
        self.ck = self.workdir / "ck"
        self.markers = self.workdir / "markers"
        self.logs = self.workdir / "logs"
        for d in (self.markers, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        brokers = len(kafka.cluster.node_infos) if kafka.cluster is not None else 1
        self.result = CampaignResult(name, mode, transaction_version, brokers, self.spark.kind)
        self.input_partitions = input_partitions
        self.output_partitions = output_partitions
        self.records_per_txn = records_per_txn
        self.feed_interval_s = feed_interval_s
        self.source = ""
        self.sink = ""
        self.feeder: InputFeeder | None = None
        self._pending = _Pending()
        self._started = 0.0
        self._driver: PipelineDriver | None = None
        self._runs = 0
        self._executor_faults = ""

    # ------------------------------------------------------------------ set-up

    def plan(self, rounds: int, optional: dict[str, str] | None = None) -> "Campaign":
        """The rounds this campaign sets out to run, and the crash targets it may miss (each with
        the reason): its verdict holds it to them."""
        self.result.rounds_planned = rounds
        self.result.optional.update(optional or {})
        return self

    def start(self, *, feed: bool = True, initial_transactions: int = 6) -> "Campaign":
        """Create the topics and start feeding (a few transactions first, so batch 1 has data)."""
        self._started = time.monotonic()
        self.source = self.kafka.create_topic(partitions=self.input_partitions)
        self.sink = self.kafka.create_topic(partitions=self.output_partitions)
        self.feeder = InputFeeder(self.kafka, self.source, self.mode, self.source,
                                  records_per_txn=self.records_per_txn,
                                  interval_s=self.feed_interval_s, seed=self.seed)
        self.feeder.produce_now(initial_transactions)
        if feed:
            self.feeder.start()
        return self

    # ---------------------------------------------------------- checkpoint state

    def commit_ids(self) -> set[int]:
        d = self.ck / "commits"
        return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.exists() else set()

    def committed(self) -> int:
        return max(self.commit_ids(), default=-1)

    def sink_prefix(self) -> str:
        ident = json.loads((self.ck / "txkafka-sink" / "sink.json").read_text())
        return f"{ident.get('prefix', 'txkafka')}-{ident['sink_id']}-"

    def commit_log(self) -> SinkCommitLog:
        return SinkCommitLog(str(self.ck))

    def pending_decision_size(self) -> int:
        """Transactions of a decided, unfinished batch (what ``during_recovery`` needs: >= 2)."""
        if not (self.ck / "txkafka-sink").exists():
            return 0
        state = self.commit_log().latest()
        return len(state.pending.decision) if state is not None and state.pending else 0

    # ------------------------------------------------------------------ drivers

    def driver_args(self, fault: str = "", until_done: bool = False,
                    timeout: float | None = None) -> list[str]:
        args = ["--bootstrap", self.kafka.bootstrap, "--input", self.source, "--output", self.sink,
                "--checkpoint", str(self.ck), "--mode", self.mode, "--trigger-ms",
                str(self.trigger_ms), "--max-offsets", str(self.max_offsets), "--master",
                self.spark.master, "--timeout", str(int(timeout or self.round_timeout + 60)),
                "--spark-conf", "spark.sql.streaming.minBatchesToRetain=100000"]
        for kv in self.spark.conf:
            args += ["--spark-conf", kv]
        if self.spark.kind == "standalone" and self._executor_faults:
            # Executors of a standalone cluster do not inherit the driver's environment.
            args += ["--spark-conf", f"spark.executorEnv.{ENV_VAR}={self._executor_faults}"]
        if self.transaction_timeout_ms:
            args += ["--transaction-timeout-ms", str(self.transaction_timeout_ms)]
        if self.mode == "aggregate":
            args += ["--window-ms", str(self.window_ms), "--watermark-ms", str(self.watermark_ms)]
        if fault:
            args += ["--fault", fault]
        if until_done:
            args.append("--until-done")
        return args

    def launch(self, fault: str = "", env: dict[str, str] | None = None, until_done: bool = False,
               timeout: float | None = None) -> PipelineDriver:
        self._runs += 1
        self._executor_faults = (env or {}).get(ENV_VAR, "")
        log_path = self.logs / f"run{self._runs:03d}.log"
        self._driver = PipelineDriver(self.driver_args(fault, until_done, timeout), log_path, env)
        return self._driver.start()

    def _fail(self, msg: str, driver: PipelineDriver | None = None) -> CampaignError:
        tail = f"\n--- driver log tail ({driver.log_path}) ---\n{driver.tail()}" if driver else ""
        return CampaignError(f"[{self.name}] {msg}{tail}")

    def wait_exit(self, driver: PipelineDriver, timeout: float, what: str) -> int:
        deadline = time.monotonic() + timeout
        while driver.alive():
            if time.monotonic() > deadline:
                driver.kill_session()
                raise self._fail(f"{what}: the driver was still running after {timeout:.0f}s",
                                 driver)
            time.sleep(0.2)
        driver.reap_session()
        return driver.poll()  # type: ignore[return-value]

    def wait_progress(self, driver: PipelineDriver, past: int, timeout: float, what: str) -> int:
        """Wait for a BATCH line with id > ``past`` (a batch committed by this run)."""
        deadline = time.monotonic() + timeout
        while True:
            done = [b for b, _rows in driver.batches() if b > past]
            if done:
                return max(done)
            if not driver.alive():
                raise self._fail(f"{what}: the driver exited (code {driver.poll()}) before "
                                 f"committing a batch after {past}", driver)
            if time.monotonic() > deadline:
                driver.kill_session()
                raise self._fail(f"{what}: no batch after {past} committed within {timeout:.0f}s",
                                 driver)
            time.sleep(0.2)

    def wait_file(self, path: Path, driver: PipelineDriver, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            if not driver.alive():
                raise self._fail(f"{what}: the driver exited (code {driver.poll()}) first", driver)
            if time.monotonic() > deadline:
                driver.kill_session()
                raise self._fail(f"{what}: not reached within {timeout:.0f}s", driver)
            time.sleep(0.1)

    # ------------------------------------------------------------------ rounds

    def kill_rules(self, point: str, from_batch: int, marker: Path, action: str = "kill",
                   extra: str = "") -> str:
        """Rules firing ``action`` once at ``point`` in batch ``from_batch`` or a later one."""
        if point == "during_recovery":
            return f"point=during_recovery,action={action},once={marker}{extra}"
        return ";".join(f"point={point},batch={b},action={action},once={marker}{extra}"
                        for b in range(from_batch, from_batch + _BATCH_WINDOW))

    @staticmethod
    def _fired_at_ms(marker: Path) -> int:
        try:
            return int(float(marker.read_text().split()[1]) * 1000)
        except (OSError, IndexError, ValueError):
            return int(marker.stat().st_mtime * 1000)

    def round(self, crash: Crash) -> RoundRecord:
        n = len(self.result.rounds) + 1
        started = time.monotonic()
        before = self.commit_ids()
        committed_before = max(before, default=-1)
        from_batch = committed_before + self.rng.choice(self.batch_deltas)
        marker = self.markers / f"round{n:03d}.fired"
        fault, env = "", {}
        if crash.kind == "point":
            assert crash.point is not None
            if self.spark.kind == "standalone" and crash.point in TASK_POINTS:
                # kill in an executor would kill the worker's whole session, not the driver.
                raise ValueError(f"{crash.point} kills a driver only in local mode")
            if crash.point == "during_recovery" and self.pending_decision_size() < 2:
                raise self._fail("during_recovery needs a decided, unfinished batch with >= 2 "
                                 "transactions; the previous round left none")
            rules = self.kill_rules(crash.point, from_batch, marker)
            if crash.point == "read_partition":
                env[ENV_VAR] = rules
            else:
                fault = rules
        slow = self.markers / f"round{n:03d}.slow"
        if crash.kind == "executor":
            if self.spark.standalone is None:
                raise ValueError("executor crashes need a standalone cluster")
            parts = [self.kill_rules("before_precommit", from_batch, slow, "sleep",
                                     f",ms={EXECUTOR_SLEEP_MS}")]
            if crash.point:
                parts.append(self.kill_rules(crash.point, from_batch, marker))
            fault = ";".join(parts)

        exit_marker = self.markers / f"round{n:03d}.exit"
        if crash.task_exit:
            # A task's Python worker dies (os._exit) at this point: Spark retries the task.
            rules = self.kill_rules(crash.task_exit, from_batch, exit_marker, "exit")
            if crash.task_exit == "read_partition":
                env[ENV_VAR] = ";".join(filter(None, [env.get(ENV_VAR), rules]))
            else:
                fault = ";".join(filter(None, [fault, rules]))

        driver = self.launch(fault, env)
        what = f"round {n} ({crash.label()})"
        landed: list[str] = []
        killed_by_us_ms = 0
        executor: dict | None = None
        if crash.kind == "random":
            self.wait_progress(driver, committed_before, self.round_timeout, what)
            time.sleep(self.rng.uniform(0.0, 2.5))
            killed_by_us_ms = self._kill_unless_ended(driver)
        elif crash.kind == "broker":
            killed_by_us_ms, bounced = self._broker_round(driver, committed_before, what)
            if bounced:
                landed.append("broker")
        elif crash.kind == "executor":
            self.wait_file(slow, driver, self.round_timeout, f"{what}: a task sleeping in pre-commit")
            executor = self._kill_executor(driver, slow, what)
            if not crash.point:
                self.wait_progress(driver, from_batch - 1, self.round_timeout, what)
                time.sleep(self.rng.uniform(0.0, 2.0))
                killed_by_us_ms = self._kill_unless_ended(driver)
        code = self.wait_exit(driver, self.round_timeout, what)

        if killed_by_us_ms:
            outcome, crash_ms = "killed (random time)", killed_by_us_ms
            self.result.random_kills += 1
            landed.append("random")
        elif code == -9 and marker.exists():
            outcome, crash_ms = f"killed at {crash.point}", self._fired_at_ms(marker)
            self.result.kills_by_point[crash.point] = self.result.kills_by_point.get(
                crash.point, 0) + 1  # type: ignore[index]
            landed.append(f"kill:{crash.point}")
        else:
            lines = driver.output().splitlines()
            failed = [ln for ln in lines if ln.startswith("PIPELINE-")]
            reason = failed[-1][:300] if failed else f"exit code {code}"
            if "PIPELINE-FAILED" not in reason:
                raise self._fail(f"{what}: the driver ended with {reason}, not the crash", driver)
            errors = [ln for ln in lines if ln.startswith("txkafka.connector.errors.")]
            reason = self._designed_failure(driver) or (errors[-1][:300] if errors else reason)
            outcome, crash_ms = f"failed: {reason}", int(time.time() * 1000)
            self.result.query_failures.append(f"round {n}: {reason}")
            consecutive = [r for r in self.result.rounds[-2:] if r.outcome.startswith("failed")]
            if len(consecutive) >= 2:
                raise self._fail(f"{what}: the query failed three rounds in a row", driver)
        if executor is not None:
            proof = self._executor_kill_proof(executor)
            if proof:
                self.result.executor_kills += 1
                landed.append("executor")
                outcome += f" (after {proof})"
            else:
                outcome += f" (executor kill NOT counted: {executor['note']})"
        if exit_marker.exists() and crash.task_exit:
            self.result.task_crashes += 1
            self.result.task_crashes_by_point[crash.task_exit] = \
                self.result.task_crashes_by_point.get(crash.task_exit, 0) + 1
            outcome += f" (after a task crash at {crash.task_exit})"
            landed.append(f"task-exit:{crash.task_exit}")
        rec = RoundRecord(n, crash.label(), outcome, committed_before, self.committed(),
                          round(time.monotonic() - started, 1), asked=crash.targets(),
                          landed=landed)
        self.record_round(rec, before, crash_ms)
        return rec

    def record_round(self, rec: RoundRecord, commits_before: set[int], crash_ms: int) -> None:
        """Add a finished round: check the recovery of the rounds before it (if this run committed
        a decided batch), then leave its own recovery to be checked by a later run."""
        self._check_recovery(commits_before)
        self._pending.rounds.append(rec)
        self._pending.crash_ms = max(self._pending.crash_ms, crash_ms)
        self.result.rounds.append(rec)
        self.log(f"[{self.name}] round {rec.number} {rec.crash}: {rec.outcome}; batches "
                 f"{rec.committed_before} -> {rec.committed_after} ({rec.seconds:.0f}s)")

    def _broker_round(self, driver: PipelineDriver, committed_before: int,
                      what: str) -> tuple[int, bool]:
        """Kill a broker node that is up mid-run, restart it; (the driver's kill time in ms or 0,
        whether the bounce counts: the node was up, died, and is up again)."""
        cluster = self.kafka.cluster
        if cluster is None or len(cluster.node_infos) < 3:
            raise ValueError("broker rounds need the 3-node cluster")
        at = self.wait_progress(driver, committed_before, self.round_timeout, what)
        every = [n.node_id for n in cluster.node_infos]
        up = cluster.alive_nodes()
        if sorted(up) != sorted(every):
            # Killing another node would test a lost quorum, not a broker bounce.
            raise self._fail(f"{what}: broker nodes {sorted(set(every) - set(up))} were already "
                             "down before the broker round", driver)
        node = self.rng.choice(every)
        cluster.kill_node(node)
        if node in cluster.alive_nodes():
            raise self._fail(f"{what}: broker node {node} survived its SIGKILL", driver)
        self.log(f"[{self.name}] {what}: killed broker node {node}")
        try:
            # Exactly-once must keep committing with one node of three down.
            at = self.wait_progress(driver, at, self.round_timeout, f"{what}, node {node} down")
            at = self.wait_progress(driver, at, self.round_timeout, f"{what}, node {node} down")
        finally:
            cluster.start_node(node)
        cluster.wait_ready(timeout=180)
        bounced = node in cluster.alive_nodes()
        if bounced:
            self.result.broker_bounces += 1
        self.log(f"[{self.name}] {what}: broker node {node} "
                 f"{'back' if bounced else 'NOT back: the bounce is not counted'}")
        self.wait_progress(driver, at, self.round_timeout, f"{what}, node {node} back")
        time.sleep(self.rng.uniform(0.0, 2.0))
        return self._kill_unless_ended(driver), bounced

    @staticmethod
    def _ended_by_itself(driver: PipelineDriver) -> bool:
        """The driver printed its final line (PIPELINE-FAILED/-DONE/-TIMEOUT): it is ending (or
        has ended) on its own, whatever a kill does to its shutdown afterwards."""
        return any(ln.startswith("PIPELINE-") and not ln.startswith("PIPELINE-STARTED")
                   for ln in driver.output().splitlines())

    def _kill_unless_ended(self, driver: PipelineDriver) -> int:
        """SIGKILL the driver's session now; the kill time in ms, or 0 when the driver had
        already exited or ended by itself (a query failure during the wait before the kill).
        0 sends the round through the failure branch, so such a failure is never recorded as
        "killed (random time)"."""
        if not driver.alive() or self._ended_by_itself(driver):
            return 0
        killed = int(time.time() * 1000)
        driver.kill_session()
        # It may have printed its end between the check and the kill.
        return 0 if self._ended_by_itself(driver) else killed

    def _kill_executor(self, driver: PipelineDriver, slow: Path, what: str) -> dict:
        """SIGKILL the executor JVM that runs the task sleeping in pre-commit (its marker names
        the Python worker; the executor is that worker's ancestor). Returns what was done: the
        task (batch, partition, attempt), the victim, and whether the kill landed in the sleep."""
        deadline = time.monotonic() + 30
        task = read_marker(str(slow))
        while "pid" not in task and time.monotonic() < deadline:  # the marker is being written
            time.sleep(0.1)
            task = read_marker(str(slow))
        pid = task.get("pid")
        executors = set(self.spark.standalone.executor_pids())  # type: ignore[union-attr]
        victim = _ancestor_in(pid, executors) if isinstance(pid, int) else None
        if victim is None:
            raise self._fail(f"{what}: the task sleeping in pre-commit (marker {task}) runs in no "
                             f"executor JVM of the cluster ({sorted(executors)})", driver)
        info = {**task, "victim": victim, "killed": False, "note": ""}
        sleep_ends = float(task["time"]) + EXECUTOR_SLEEP_MS / 1000.0  # type: ignore[arg-type]
        if time.time() >= sleep_ends:
            info["note"] = (f"the task left its pre-commit sleep before executor JVM {victim} "
                            "could be killed; not killed")
            self.log(f"[{self.name}] {what}: {info['note']}")
            return info
        os.kill(victim, signal.SIGKILL)
        gone = time.monotonic() + 30
        while _alive(victim):
            if time.monotonic() > gone:
                raise self._fail(f"{what}: executor JVM {victim} survived SIGKILL for 30 s",
                                 driver)
            time.sleep(0.1)
        info["killed"] = True
        self.log(f"[{self.name}] {what}: SIGKILLed executor JVM {victim}, which ran batch "
                 f"{task.get('batch')} task partition {task.get('partition')} attempt "
                 f"{task.get('attempt')} sleeping in pre-commit (Python worker {pid})")
        return info

    def _executor_kill_proof(self, info: dict) -> str | None:
        """Why the executor kill counts (the JVM that ran the sleeping task died before the sleep
        ended), or None. When the sink decided that batch with the partition from a later
        attempt, the retry is named too (a stage re-attempt after lost shuffle output numbers
        its tasks from 0 again, so a same-numbered attempt proves nothing either way)."""
        if not info["killed"]:
            return None
        batch, partition, attempt = info.get("batch"), info.get("partition"), info.get("attempt")
        what = (f"executor JVM {info['victim']} killed while batch {batch} task partition "
                f"{partition} attempt {attempt} sat in pre-commit")
        if not (self.ck / "txkafka-sink").exists() or not isinstance(batch, int):
            return what
        state = self.commit_log().batch_state(batch)
        attempts = {c.attempt for r in (state.rounds if state else [])
                    for c in r.decision if c.partition_id == partition}
        if isinstance(attempt, int) and attempts and max(attempts) > attempt:
            return f"{what}; retried as attempt {max(attempts)}"
        return what

    # ------------------------------------------------------------------ checks

    def stale_open(self, before_ms: int) -> list[str]:
        """Open transactions of the sink that started before ``before_ms`` (a crash)."""
        prefix = self.sink_prefix()
        listed = self.kafka.open_transactions(prefix)
        if not listed:
            return []
        with TransactionClient(self.kafka.conf) as tc:
            descs = tc.describe(t.transactional_id for t in listed)
        return [f"{d.transactional_id} {d.state} started {d.start_time_ms} (crash {before_ms})"
                for d in descs.values()
                if d.state not in ("Empty", "CompleteCommit", "CompleteAbort", "Dead")
                and 0 <= d.start_time_ms < before_ms]

    def _check_recovery(self, commits_before: set[int]) -> None:
        """If this run committed a batch the sink decided (such a commit sweeps orphans), no
        transaction begun before the previous crashes may still be open."""
        if not self._pending.rounds:
            return
        new = sorted(self.commit_ids() - commits_before)
        log = self.commit_log()
        states = [log.batch_state(b) for b in new]
        if not any(st is not None and not st.empty for st in states):
            # no decided batch yet (a batch without rows commits nothing and need not sweep):
            # the check waits for a later run
            return
        stale = self.stale_open(self._pending.crash_ms)
        for rec in self._pending.rounds:
            rec.stale_open = len(stale)
        self.result.stale_checks += len(self._pending.rounds)
        self.result.stale_open += len(stale)
        if stale:
            self.log(f"[{self.name}] ORPHANS after recovery: {stale}")
        self._pending = _Pending()

    # ------------------------------------------------------------------ finish

    def finish(self) -> CampaignResult:
        """Stop the feeder, let a last run catch up, then verify everything."""
        assert self.feeder is not None
        self.feeder.stop()
        before = self.commit_ids()
        for attempt in (1, 2):
            driver = self.launch(until_done=True, timeout=self.final_timeout)
            code = self.wait_exit(driver, self.final_timeout + 30, "final run")
            reason = self._designed_failure(driver) if code == 2 else None
            if code == 0:
                break
            if attempt == 1 and reason:
                # The sink failed a batch on purpose (a transaction too close to its timeout on
                # a slow machine); Spark re-runs it on restart. Recorded, then restarted once.
                self.result.query_failures.append(f"final run: {reason}")
                continue
            raise self._fail(f"final run exited with code {code}", driver)
        self.close_rounds(before, driver)
        return self.conclude()

    def close_rounds(self, commits_before: set[int], driver: PipelineDriver | None = None) -> None:
        """After the last run: the recovery of every round must have been checked."""
        self._check_recovery(commits_before)
        if self._pending.rounds:
            raise self._fail("the final run committed no batch, so the last recovery is unchecked",
                             driver)

    def conclude(self) -> CampaignResult:
        """After the last run: the open transactions, the verification and the verdict."""
        if self.feeder is not None and not self.result.feeder:
            stats = self.feeder.stats
            self.result.feeder = {
                "transactions_committed": stats.transactions_committed,
                "transactions_aborted": stats.transactions_aborted,
                "transactions_failed": stats.transactions_failed,
                "records_committed": stats.records_committed,
                "records_aborted": stats.records_aborted,
                "errors": stats.errors[:5],
            }
        self.result.final_open = [f"{t.transactional_id} {t.state}"
                                  for t in self.kafka.open_transactions(self.sink_prefix())]
        self.verify()
        log = self.commit_log()
        self.result.rerun_rounds = sum(1 for b in log.batch_ids()
                                       if len((log.batch_state(b) or _NoRounds).rounds) > 1)
        self.result.batches = self.committed() + 1
        self.result.seconds = round(time.monotonic() - self._started, 1)
        r = self.result
        problems = r.problems()
        self.log(f"[{self.name}] {'EXACTLY ONCE' if not problems else 'FAILED'}: {r.verify_text}"
                 + "".join(f"\n  {p}" for p in problems))
        return r

    @staticmethod
    def _designed_failure(driver: PipelineDriver) -> str | None:
        """The sink's deliberate batch failure (invariant 7: a transaction that cannot be
        committed fails the batch, all aborted, no decision), else None."""
        for line in driver.output().splitlines():
            if line.startswith("txkafka.connector.errors.TransactionError: ") and \
                    DESIGNED_FAILURE in line:
                return line[len("txkafka.connector.errors."):][:300]
        return None

    def verify(self) -> None:
        """Verify the output read_committed into the result; a verifier that raises (a metadata
        error exits, a read times out) is recorded as the campaign's error, never lost."""
        conf = self.kafka.conf
        r = self.result
        try:
            if self.mode == "map":
                rep = verify(conf, self.source, self.sink)
                r.records_verified = rep.expected
                r.updates_verified = rep.found
                r.duplicates, r.missing = rep.duplicates, rep.missing
                r.unexpected, r.order_violations = rep.unexpected, rep.order_violations
            else:
                rep = verify_windowed_counts(conf, self.source, self.sink, self.window_ms,
                                             checkpoint=str(self.ck))
                r.records_verified = rep.input_records
                r.updates_verified = rep.found
                r.duplicates, r.missing = rep.duplicates, rep.missing
                r.unexpected = rep.unexpected + rep.wrong_counts
                r.open_windows = rep.open
        except (Exception, SystemExit) as e:  # noqa: BLE001 - recorded as the verdict's error
            r.errors.append(f"the verifier raised {type(e).__name__}: {e}"[:2000])
            r.verify_text = f"not verified: {type(e).__name__}: {e}"[:2000]
            return
        r.verify_text = rep.text()

    def run(self, crashes: list[Crash]) -> CampaignResult:
        """Start, run every round, finish; drivers and the feeder never outlive this call."""
        try:
            if not self.result.rounds_planned:
                self.plan(len(crashes))
            if not self.source:
                self.start()
            for crash in crashes:
                if crash.kind == "point" and crash.point == "during_recovery":
                    self.ensure_pending_decision()
                self.round(crash)
            return self.finish()
        finally:
            self.close()

    def ensure_pending_decision(self, tries: int = 3) -> None:
        """``during_recovery`` needs a decided, unfinished batch of >= 2 transactions."""
        for _ in range(tries):
            if self.pending_decision_size() >= 2:
                return
            self.round(Crash("point", "after_decision"))
        if self.pending_decision_size() < 2:
            raise self._fail(f"no decided batch with >= 2 transactions after {tries} rounds")

    def close(self) -> None:
        if self._driver is not None and self._driver.alive():
            self._driver.kill_session()
        if self.feeder is not None and self.feeder._thread is not None \
                and self.feeder._thread.is_alive():
            self.feeder._stop.set()
            self.feeder._thread.join(60)


class _NoRounds:
    rounds: list = []


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return ") Z" not in stat and ") X" not in stat


def _ancestor_in(pid: int, candidates: set[int]) -> int | None:
    """The nearest ancestor of ``pid`` (or pid itself) among ``candidates`` (Linux /proc)."""
    seen = 0
    while pid > 1 and seen < 64:
        if pid in candidates:
            return pid
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        # Fields after the command's closing parenthesis: state, ppid, ...
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        seen += 1
    return None
