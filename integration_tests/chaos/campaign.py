"""One chaos campaign: one pipeline (input, output, checkpoint) driven through many crashes.

A round is one driver run that ends in a crash:
- ``point``: the driver is SIGKILLed at a named injection point (TXKAFKA_FAULT_INJECTION,
  ``txkafka.pipeline --fault``, with ``action=kill``: every process of its session dies at once);
- ``random``: after the run made progress, SIGKILL at a random moment;
- ``broker``: one node of the 3-node cluster, up until then, is SIGKILLed mid-run, the pipeline
  must keep committing, the node is restarted (and must be up again), then the driver is killed at
  a random moment;
- ``rolling``: a rolling restart under the running query, as an operator does it: every broker of
  the 3-node cluster (or ``brokers`` of them) goes down once in turn, for each way in ``how``
  (``sigterm``: a controlled shutdown, then a restart; ``sigkill``: a crash, then a restart;
  ``sigstop``: frozen for ``outage_s``, longer than the request timeouts in force, then continued),
  waiting between two outages until the cluster is whole again (every replica in sync). The query
  must commit a batch while each node is down (not for sigstop) and after it is back; a query
  failure is counted, never retried away. Then the driver is killed at random, or (``last``) the
  run finishes the input as the final run;
- ``executor`` (Spark standalone): a task sleeps in its pre-commit; the executor JVM running it
  (found from the pid its fault-injection marker records) is SIGKILLed before the sleep ends, then
  the driver is killed (at a point, or at random).
Operator actions are rounds too, each with the outcome it must show (summary.OPERATOR_STEPS):
- ``relayout``: the next run has another task layout (coalesce, repartition, minPartitions). With
  no redo pending it continues; with a lost round waiting to be re-written (``relayout`` with
  point ``redo`` first loses a decided batch to the transaction timeout) it must fail with
  TaskLayoutChangedError, and the run with the layout restored re-writes the lost round;
- ``rollback``: the newest ``offsets/N`` and ``commits/N`` (and .crc files) are removed between
  runs, as for a corrupt last offsets file. A re-planned batch that reads the same offsets
  (point ``same``: the feeder pauses and a run catches up first) is skipped, logged; one that
  reads others must fail with CheckpointMismatchError, and the campaign recovers as the docs say:
  it restores the removed files (``how=restore``) or moves on by a savepoint (``how=savepoint``);
- ``savepoint`` (map only: a savepoint carries no aggregation state): the driver is killed (at a
  point, mid-batch, or at random), ``txkafka savepoint create`` resolves the old sink, and a
  CHANGED query (another projection and layout) continues on a new checkpoint, writing the same
  output topic. The verification spans everything every checkpoint wrote.
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
import re
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
    STEP_ERRORS,
    WRITER_POINTS,
    CampaignResult,
    RoundRecord,
)
from integration_tests.kafka_helpers import KafkaTarget
from txkafka import savepoint as savepoints
from txkafka.connector.fault_injection import ENV_VAR, read_marker
from txkafka.connector.source.offsets import BATCH_START_KEY, from_offset_json
from txkafka.connector.checkpoint.savepoint import kafka_offsets, read_savepoint
from txkafka.connector.sink.commit_log import BatchState, SinkCommitLog
from txkafka.connector.checkpoint.spark_checkpoint import SparkCheckpoint
from txkafka.connector.client.transactions import TransactionClient
from txkafka.verify import verify, verify_windowed_counts

TASK_POINTS = ("before_precommit", "after_precommit", "read_partition")
DRIVER_POINTS = tuple(p for p in WRITER_POINTS if p not in TASK_POINTS)
# A kill rule armed "at batch B or later": one rule per batch sharing one once-marker, so the
# kill still happens when batch B does not reach the point (no data there, one transaction only).
_BATCH_WINDOW = 40
# How long the executor round's task sleeps in pre-commit: the campaign must find and kill its
# executor meanwhile (a kill after the sleep ended is not counted); killed, the sleep costs nothing.
EXECUTOR_SLEEP_MS = 15000
# The run that loses a decided batch (``relayout`` with a redo) writes with this transaction
# timeout and is killed after its decision; the broker then aborts the batch within about this
# long. Long enough that a batch on a busy machine still reaches its decision with time left.
LOSS_TIMEOUT_MS = 30000
# The ways a rolling restart takes a broker down (Crash("rolling", how=...)).
OUTAGE_WAYS = ("sigterm", "sigkill", "sigstop")
# ``savepoint create`` watches a stopped query this long before resolving its sink.
SAVEPOINT_QUIET_S = 5.0
SKIP_LOGGED = "the sink committed this batch already"


@dataclass(frozen=True)
class Layout:
    """A task layout of the pipeline: its flags, and what the sink's decision records of it."""

    name: str
    args: tuple[str, ...]
    # Records of one input partition spread over several tasks: their order in an output
    # partition is no longer the input's, so the map's order check is off from then on.
    reorders: bool

    @property
    def one_task(self) -> bool:
        """One write task per batch: one transaction, so nothing runs between two EndTxn calls."""
        return self.name == "coalesce-1"

    def shows_in(self, tasks: int, mode: str, input_partitions: int) -> bool:
        """Whether a decision with ``tasks`` task partitions can come from this layout."""
        kind, _, n = self.name.partition("-")
        if kind == "coalesce":
            return tasks <= int(n)
        if kind == "repartition":
            return tasks == int(n)
        if kind == "split":
            # minPartitions N: ranges split into about N tasks (a range too short to split may
            # leave one fewer), always more than the input's partitions
            return tasks >= max(int(n) - 1, input_partitions + 1)
        # as read: one task per input partition with data (map; the feeder's transactions span
        # every partition), spark.sql.shuffle.partitions (aggregate)
        return tasks == 2 if mode == "aggregate" else 1 < tasks <= input_partitions


AS_READ = Layout("as-read", (), False)
LAYOUTS = {
    "map": (AS_READ, Layout("coalesce-1", ("--coalesce", "1"), False),
            Layout("repartition-4", ("--repartition", "4"), True),
            Layout("split-6", ("--min-partitions", "6"), True)),
    # minPartitions does not reach the sink behind the aggregation's shuffle
    "aggregate": (AS_READ, Layout("coalesce-1", ("--coalesce", "1"), False),
                  Layout("repartition-3", ("--repartition", "3"), True)),
}


class CampaignError(AssertionError):
    """A round did not behave (no crash, no progress, a wrong exit); carries the driver's log."""


@dataclass(frozen=True)
class Crash:
    """How a round ends."""

    # "point" | "random" | "broker" | "rolling" | "executor" | "relayout" | "rollback" |
    # "savepoint"
    kind: str
    # point: where; executor: the driver point killed after it (or random); relayout: "redo" to
    # lose a decided batch first; rollback: "same" to replay the same offsets (else other ones);
    # savepoint: the point the old driver is killed at (None: a random moment)
    point: str | None = None
    task_exit: str | None = None  # also crash one task's Python worker at this task-side point
    # relayout: the layout to switch to (LAYOUTS name; None: drawn); rollback: the recovery
    # from a CheckpointMismatchError, "restore" (the removed files) or "savepoint"; savepoint:
    # "stopped" to take it of the query the previous round ended (no kill of its own)
    how: str | None = None
    # relayout (refused) and savepoint: the step's last run is the campaign's final run (feeder
    # stopped, until done, no kill), which saves CI a driver start; it must be the last crash
    last: bool = False
    # rollback with "restore": the run after the restore also switches to this layout (LAYOUTS
    # name), so that one run shows both rollback-restored and relayout (a round each)
    layout: str | None = None
    # rolling: how many brokers go down in turn (0: every one; else the leaders of the output's
    # first partitions first); ``how`` names the ways, comma-separated (OUTAGE_WAYS)
    brokers: int = 0

    @property
    def ways(self) -> list[str]:
        ways = [w.strip() for w in (self.how or ",".join(OUTAGE_WAYS)).split(",") if w.strip()]
        unknown = [w for w in ways if w not in OUTAGE_WAYS]
        if unknown:
            raise ValueError(f"unknown outage ways {unknown}; known: {OUTAGE_WAYS}")
        return ways

    def label(self) -> str:
        if self.kind == "point":
            text = f"point:{self.point}"
        elif self.kind == "executor":
            text = f"executor+{'point:' + self.point if self.point else 'random'}"
        elif self.kind in ("relayout", "rollback"):
            text = self.kind + "".join(f":{x}" for x in (self.point, self.how) if x)
        elif self.kind == "savepoint":
            text = "savepoint" + ("" if self.how == "stopped" else
                                  f"+{'point:' + self.point if self.point else 'random'}")
        elif self.kind == "rolling":
            text = (f"rolling:{'+'.join(self.ways)}"
                    + (f":{self.brokers}-broker(s)" if self.brokers else "")
                    + ("" if self.last else "+random"))
        else:
            text = self.kind
        return text + (f"+task-exit:{self.task_exit}" if self.task_exit else "")

    def targets(self) -> list[str]:
        """The crash targets (summary.py's vocabulary) this round asks for. An operator step's
        rounds also record the outcomes they accept and the one they showed (RoundRecord)."""
        if self.kind == "point":
            out = [f"kill:{self.point}"]
        elif self.kind == "random":
            out = ["random"]
        elif self.kind == "broker":
            out = ["broker", "random"]
        elif self.kind == "rolling":
            out = [f"broker:{w}" for w in self.ways] + ([] if self.last else ["random"])
        elif self.kind in ("relayout", "rollback"):
            # the runs that lose a batch and that catch up are killed; the outcomes of the
            # others depend on the state they meet, checked as each round's expected outcome
            out = ["kill:after_decision"] if self.point == "redo" else (
                ["random"] if self.point == "same" else [])
        elif self.kind == "savepoint":
            out = [] if self.how == "stopped" else [
                f"kill:{self.point}" if self.point else "random"]
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
                 batch_deltas: tuple[int, ...] = (1, 2, 3), producer: str = "txkafka",
                 sink_conf: tuple[str, ...] = (), outage_s: float = 40.0,
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
        self.result = CampaignResult(name, mode, transaction_version, brokers, self.spark.kind,
                                     producer=producer)
        self.producer = producer  # the sink's producer option (txkafka, the default; librdkafka)
        # kafka.* settings of the sink only (key=value), e.g. a shorter request.timeout.ms
        self.sink_conf = tuple(sink_conf)
        # How long a rolling restart's sigstop freezes a broker: longer than the request
        # timeouts in force (librdkafka's request.timeout.ms is 30 s by default, txkafka's own
        # connections wait 10 s per attempt) and than broker.session.timeout.ms.
        self.outage_s = outage_s
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
        self._final_done = False  # a step ran the final run (Crash.last)
        # roll_back_unchanged(): the rolled-back batch the next relayout run must skip
        self._rolled_back: int | None = None
        self._executor_faults = ""
        # What an operator step changed: the task layout, the query (map -> project after a
        # savepoint), the checkpoint (every one used, for the final checks) and its savepoint.
        self.layout = AS_READ
        self.query = mode
        self.savepoint: Path | None = None
        self.checkpoints = [self.ck]

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

    def sink_prefix(self, ck: Path | None = None) -> str:
        ident = json.loads(((ck or self.ck) / "txkafka-sink" / "sink.json").read_text())
        return f"{ident.get('prefix', 'txkafka')}-{ident['sink_id']}-"

    def sink_prefixes(self) -> list[str]:
        """The transactional-id prefix of every checkpoint's sink (a savepoint moves to a new
        checkpoint, and so to a new sink)."""
        return [self.sink_prefix(ck) for ck in self.checkpoints
                if (ck / "txkafka-sink" / "sink.json").exists()]

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
                    timeout: float | None = None, transaction_timeout_ms: int = 0,
                    stop_file: Path | None = None) -> list[str]:
        args = ["-b", self.kafka.bootstrap, "--input", self.source, "--output", self.sink,
                "--checkpoint", str(self.ck), "--mode", self.query, "--trigger-ms",
                str(self.trigger_ms), "--max-offsets", str(self.max_offsets), "--master",
                self.spark.master, "--timeout", str(int(timeout or self.round_timeout + 60)),
                "--spark-conf", "spark.sql.streaming.minBatchesToRetain=100000",
                "--producer", self.producer, *self.layout.args]
        if self.savepoint is not None:
            # Read by the checkpoint's first run only; a restart resumes from its checkpoint.
            args += ["--savepoint", str(self.savepoint)]
        for kv in self.spark.conf:
            args += ["--spark-conf", kv]
        if self.spark.kind == "standalone" and self._executor_faults:
            # Executors of a standalone cluster do not inherit the driver's environment.
            args += ["--spark-conf", f"spark.executorEnv.{ENV_VAR}={self._executor_faults}"]
        if transaction_timeout_ms or self.transaction_timeout_ms:
            args += ["--transaction-timeout-ms",
                     str(transaction_timeout_ms or self.transaction_timeout_ms)]
        if self.mode == "aggregate":
            args += ["--window-ms", str(self.window_ms), "--watermark-ms", str(self.watermark_ms)]
        for kv in self.sink_conf:
            args += ["--sink-conf", kv]
        if fault:
            args += ["--fault", fault]
        if until_done:
            args.append("--until-done")
        if stop_file is not None:
            args += ["--stop-file", str(stop_file)]
        return args

    def launch(self, fault: str = "", env: dict[str, str] | None = None, until_done: bool = False,
               timeout: float | None = None, transaction_timeout_ms: int = 0,
               stop_file: Path | None = None) -> PipelineDriver:
        self._runs += 1
        self._executor_faults = (env or {}).get(ENV_VAR, "")
        log_path = self.logs / f"run{self._runs:03d}.log"
        self._driver = PipelineDriver(
            self.driver_args(fault, until_done, timeout, transaction_timeout_ms, stop_file),
            log_path, env)
        return self._driver.start()

    def launch_final(self) -> PipelineDriver:
        """The campaign's last run: the feeder stopped first (the run's target is the input's
        end at its start), until done."""
        if self.feeder is not None and not self.feeder.stopped:
            self.feeder.stop()  # once: in aggregate mode stop() writes the closing records
        return self.launch(until_done=True, timeout=self.final_timeout)

    def _end_final(self, driver: PipelineDriver, what: str) -> tuple[PipelineDriver, int]:
        """Wait for the final run; it must end by itself (exit 0). Returns the run that did
        and when it ended."""
        for attempt in (1, 2):
            code = self.wait_exit(driver, self.final_timeout + 30, what)
            reason = self._designed_failure(driver) if code == 2 else None
            if code == 0:
                break
            if attempt == 1 and reason:
                # The sink failed a batch on purpose (a transaction too close to its timeout on
                # a slow machine); Spark re-runs it on restart. Recorded, then restarted once.
                self.result.query_failures.append(f"final run: {reason}")
                driver = self.launch(until_done=True, timeout=self.final_timeout)
                continue
            raise self._fail(f"{what}: the final run exited with code {code}", driver)
        self._final_done = True
        return driver, int(time.time() * 1000)

    def _run_ended(self, driver: PipelineDriver, what: str, outcome: str, killed: int,
                   code: int | None, final_ms: int = 0) -> tuple[str, int]:
        """A step run's outcome with how it ended, and the crash time its recovery check uses:
        the final run (ended at ``final_ms``), a random kill, or a failure (recorded)."""
        if final_ms:
            return outcome + "; the final run, ended by itself", final_ms
        if killed:
            return outcome + ", then killed (random time)", killed
        reason = self._failure_reason(driver, code, what)
        self._record_failure(len(self.result.rounds) + 1, reason, driver, what)
        return outcome + f"; failed: {reason}", int(time.time() * 1000)

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
        if crash.kind == "rolling":
            return self.rolling_step(crash)
        if crash.kind == "relayout":
            return self.relayout_step(crash)
        if crash.kind == "rollback":
            return self.rollback_step(crash)
        if crash.kind == "savepoint":
            return self.savepoint_step(crash)
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
            reason = self._failure_reason(driver, code, what)
            outcome, crash_ms = f"failed: {reason}", int(time.time() * 1000)
            self._record_failure(n, reason, driver, what)
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

    def _failure_reason(self, driver: PipelineDriver, code: int | None, what: str) -> str:
        """Why a run that nobody killed ended: the sink's error (its designed failure first).
        A run that did not end in a query failure is a campaign error."""
        lines = driver.output().splitlines()
        failed = [ln for ln in lines if ln.startswith("PIPELINE-")]
        reason = failed[-1][:300] if failed else f"exit code {code}"
        if "PIPELINE-FAILED" not in reason:
            raise self._fail(f"{what}: the driver ended with {reason}, not the crash", driver)
        errors = [ln for ln in lines if ln.startswith("txkafka.connector.errors.")]
        return self._designed_failure(driver) or (errors[-1][:300] if errors else reason)

    def _record_failure(self, n: int, reason: str, driver: PipelineDriver, what: str,
                        expected: bool = False) -> None:
        """A query failure of round ``n``; ``expected``: the one an operator step must provoke."""
        self.result.query_failures.append(f"round {n}: {reason}")
        if expected:
            self.result.expected_failures.append(f"round {n}: {reason}")
            return
        consecutive = [r for r in self.result.rounds[-2:] if r.outcome.startswith("failed")
                       and not r.observed]
        if len(consecutive) >= 2:
            raise self._fail(f"{what}: the query failed three rounds in a row", driver)

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

    # -- rolling restart

    def _rolling_order(self, crash: Crash) -> list[int]:
        """The brokers a rolling restart takes down, in turn: every node in order, or the first
        ``crash.brokers`` leaders of the output's partitions (the nodes whose loss matters)."""
        every = [n.node_id for n in self.kafka.cluster.node_infos]
        if not crash.brokers:
            return every
        md = self.kafka.admin().list_topics(self.sink, timeout=10)
        t = md.topics.get(self.sink)
        leaders = [t.partitions[p].leader for p in sorted(t.partitions)] if t else []
        order = [b for b in dict.fromkeys(leaders + every) if b in every]
        return order[:crash.brokers]

    def _wait_whole(self, what: str) -> None:
        """What an operator waits for before the next node goes down: every node up and
        registered, a transaction commits, and every partition's replicas in sync again."""
        cluster = self.kafka.cluster
        every = sorted(n.node_id for n in cluster.node_infos)
        if sorted(cluster.alive_nodes()) != every:
            raise self._fail(f"{what}: broker nodes {sorted(set(every) - set(cluster.alive_nodes()))}"
                             " are down before the next outage")
        cluster.wait_ready(timeout=180)
        admin = self.kafka.admin()
        deadline = time.monotonic() + 180
        while True:
            md = admin.list_topics(timeout=10)
            lagging = [f"{t}-{p}" for t, tm in md.topics.items()
                       for p, pm in tm.partitions.items() if set(pm.isrs) != set(pm.replicas)]
            if not lagging:
                return
            if time.monotonic() > deadline:
                raise self._fail(f"{what}: partitions still under-replicated after 180s: "
                                 f"{lagging[:10]}")
            time.sleep(0.5)

    def _progress_or_end(self, driver: PipelineDriver, past: int, what: str) -> int | None:
        """The newest batch this run committed after ``past`` once there is one, or None when
        the run ended by itself first (a query failure)."""
        got = self._watch(driver, lambda: [b for b, _rows in driver.batches() if b > past], what,
                          f"no batch after {past} committed")
        return max(got) if got else None

    def _outage(self, driver: PipelineDriver, node: int, way: str, at: int,
                what: str) -> tuple[int | None, str]:
        """Take ``node`` down ``way`` and bring it back; (the newest batch committed once it is
        back, None if the run ended; what happened)."""
        cluster = self.kafka.cluster
        down_at = time.monotonic()
        during: int | None = at
        if way == "sigstop":
            cluster.pause_node(node)
            try:
                end = down_at + self.outage_s
                while time.monotonic() < end and driver.alive() and \
                        not self._ended_by_itself(driver):
                    time.sleep(0.2)
            finally:
                cluster.resume_node(node)
            during = max([at] + [b for b, _rows in driver.batches()])
        else:
            cluster.kill_node(node, signal.SIGTERM if way == "sigterm" else signal.SIGKILL)
            try:
                if node in cluster.alive_nodes():
                    raise self._fail(f"{what}: broker node {node} survived its {way}", driver)
                # The query keeps committing with one node of three down.
                during = self._progress_or_end(driver, at, f"{what}, node {node} down ({way})")
            finally:
                cluster.start_node(node)
        down_s = time.monotonic() - down_at
        self.result.broker_bounces += 1
        self.result.broker_outages[way] = self.result.broker_outages.get(way, 0) + 1
        note = (f"node {node} {way} {down_s:.0f}s, batches {at}->{during}"
                if during is not None else f"node {node} {way}: the query ended while it was down")
        self.log(f"[{self.name}] {what}: {note}")
        if during is None:
            return None, note
        self._wait_whole(what)
        back = self._progress_or_end(driver, during, f"{what}, node {node} back")
        return back, note + (f", {back} once back" if back is not None else
                             ", the query ended once it was back")

    def rolling_step(self, crash: Crash) -> RoundRecord:
        """A rolling restart under one running query (Crash docs, ``rolling``); any query failure
        is recorded as the round's outcome."""
        cluster = self.kafka.cluster
        if cluster is None or len(cluster.node_infos) < 3:
            raise ValueError("rolling restarts need the 3-node cluster")
        n = len(self.result.rounds) + 1
        started, before = time.monotonic(), self.commit_ids()
        committed_before = max(before, default=-1)
        what = f"round {n} ({crash.label()})"
        order = self._rolling_order(crash)
        ways = crash.ways
        stop_file = self.markers / f"round{n:03d}.stop"
        # The run lasts for every outage (each waits at most a round timeout for progress).
        run_timeout = self.round_timeout * (1 + 2 * len(order) * len(ways)) + self.final_timeout
        driver = self.launch(timeout=run_timeout, stop_file=stop_file if crash.last else None)
        notes: list[str] = []
        landed: list[str] = []
        try:
            at = self._progress_or_end(driver, committed_before, f"{what}, first batch")
            for way in ways:
                for node in order:
                    if at is None:
                        break
                    self._wait_whole(what)
                    at, note = self._outage(driver, node, way, at, what)
                    notes.append(note)
                    if f"broker:{way}" not in landed:
                        landed.append(f"broker:{way}")
        finally:
            for node in order:  # never leave a node frozen or down, whatever failed
                cluster.resume_node(node)
                if node not in cluster.alive_nodes():
                    cluster.start_node(node)
        outcome = f"{len(notes)} outages under one run: " + "; ".join(notes)
        killed, code, final_ms = 0, None, 0
        if at is None:
            code = self.wait_exit(driver, self.round_timeout, what)
        elif crash.last:
            # The feeder stops; the run finishes what the input holds then and ends by itself.
            self.feeder.stop()  # type: ignore[union-attr]
            stop_file.touch()
            driver, final_ms = self._end_final(driver, what)
        else:
            killed = self._end_randomly(driver, landed)
            code = self.wait_exit(driver, self.round_timeout, what)
        outcome, crash_ms = self._run_ended(driver, what, outcome, killed, code, final_ms)
        rec = self._step_round(crash.label(), started, committed_before, before, crash_ms,
                               outcome, asked=crash.targets(), landed=landed)
        if crash.last:
            self.close_rounds(before, driver)
        return rec

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

    # ------------------------------------------------------------ operator actions

    def _other_layout(self, name: str | None) -> Layout:
        """The layout a ``relayout`` switches to: ``name`` (a LAYOUTS name), else drawn."""
        choices = [lay for lay in LAYOUTS[self.mode] if lay != self.layout]
        if name is None:
            return self.rng.choice(choices)
        picked = [lay for lay in choices if lay.name == name]
        if not picked:
            raise ValueError(f"layout {name!r} is not one of {[lay.name for lay in choices]} "
                             f"(the {self.mode} pipeline runs {self.layout.name} now)")
        return picked[0]

    def _use_layout(self, layout: Layout) -> None:
        if layout.reorders and self.mode == "map" and not self.result.order_note:
            self.result.order_note = (
                f"from round {len(self.result.rounds) + 1} the pipeline ran layout {layout.name} "
                f"({' '.join(layout.args)}), which spreads an input partition over tasks")
        self.layout = layout

    def _sink_newest(self) -> int:
        return max(self.commit_log().batch_ids(), default=-1) \
            if (self.ck / "txkafka-sink").exists() else -1

    def _layout_shown(self, layout: Layout, after: int) -> tuple[int, int] | None:
        """(batch, task partitions) of a batch after ``after`` that the sink completed with a
        decision of ``layout``'s shape, or None."""
        if not (self.ck / "txkafka-sink").exists():
            return None
        log = self.commit_log()
        for b in sorted(b for b in log.batch_ids() if b > after):
            st = log.batch_state(b)
            if st is None or st.empty or not st.complete or st.last.layout is None:
                continue
            if layout.shows_in(len(st.last.layout), self.mode, self.input_partitions):
                return b, len(st.last.layout)
        return None

    def _watch(self, driver: PipelineDriver, until, what: str, waiting_for: str):
        """Poll ``until()`` while the run lives: its first truthy answer, or None when the run
        ended by itself. Past the round timeout the run is killed and the campaign fails."""
        deadline = time.monotonic() + self.round_timeout
        while driver.alive() and not self._ended_by_itself(driver):
            got = until()
            if got:
                return got
            if time.monotonic() > deadline:
                driver.kill_session()
                raise self._fail(f"{what}: {waiting_for} within {self.round_timeout:.0f}s",
                                 driver)
            time.sleep(0.3)
        return None

    def _wait_layout_shown(self, driver: PipelineDriver, layout: Layout, after: int,
                           what: str) -> tuple[int, int] | None:
        """Until the run completed a batch after ``after`` with ``layout`` (that batch and its
        task partitions), or ended by itself (None)."""
        return self._watch(driver, lambda: self._layout_shown(layout, after), what,
                           f"no batch completed with layout {layout.name}")

    def _lost_batch(self) -> BatchState | None:
        """The newest batch, if it has lost task partitions waiting to be re-written."""
        if not (self.ck / "txkafka-sink").exists():
            return None
        st = self.commit_log().latest()
        return st if st is not None and st.redo_partitions else None

    def _step_round(self, label: str, started: float, committed_before: int,
                    commits_before: set[int], crash_ms: int, outcome: str, *,
                    asked: list[str], landed: list[str], expected: list[str] = (),
                    observed: str = "") -> RoundRecord:
        """Record one run of an operator step; its outcome counts only if it was expected."""
        if observed and observed in expected:
            self.result.operator_steps[observed] = self.result.operator_steps.get(observed, 0) + 1
        rec = RoundRecord(len(self.result.rounds) + 1, label, outcome, committed_before,
                          self.committed(), round(time.monotonic() - started, 1), asked=asked,
                          landed=landed, expected=list(expected), observed=observed)
        self.record_round(rec, commits_before, crash_ms)
        return rec

    def _end_randomly(self, driver: PipelineDriver, landed: list[str]) -> int:
        """Kill the driver after a random 0-2 s (the kill time in ms), unless it ended first."""
        time.sleep(self.rng.uniform(0.0, 2.0))
        killed = self._kill_unless_ended(driver)
        if killed:
            self.result.random_kills += 1
            landed.append("random")
        return killed

    def _refused(self, driver: PipelineDriver, error: str) -> tuple[int, str] | None:
        """(batch, the error line) when the run failed with ``error`` (a TxKafkaError class
        name), naming a batch."""
        for line in driver.output().splitlines():
            m = re.match(rf"txkafka\.connector\.errors\.{error}: batch (\d+):", line)
            if m:
                return int(m.group(1)), line[len("txkafka.connector.errors."):][:300]
        return None

    def wait_aborted_by_broker(self, decided: list, timeout: float) -> dict:
        """Wait until the coordinator has ended every decided-but-uncommitted transaction.

        Returns, per transactional id: its final state, its transaction.timeout.ms, the wall-clock
        time (ms) at which the coordinator may abort it (start + timeout, from the first
        description that had a start time) and the wall-clock time (ms) at which it was first seen
        ended."""
        deadline = time.monotonic() + timeout
        states: dict = {}
        abort_at: dict[str, int | None] = {}
        with TransactionClient(self.kafka.conf) as tc:
            while time.monotonic() < deadline:
                descs = tc.describe(c.transactional_id for c in decided)
                now_ms = int(time.time() * 1000)
                for d in descs.values():
                    if abort_at.get(d.transactional_id) is None:
                        abort_at[d.transactional_id] = d.deadline_ms()
                states = {d.transactional_id: (d.state, d.producer_epoch) for d in descs.values()}
                if len(descs) == len(decided) and all(d.state != "Ongoing"
                                                      for d in descs.values()):
                    return {d.transactional_id: (d.state, d.timeout_ms,
                                                 abort_at[d.transactional_id], now_ms)
                            for d in descs.values()}
                time.sleep(0.5)
        raise self._fail(f"the broker did not time out the decided transactions in {timeout}s: "
                         f"{states}")

    # -- restart with changed parallelism

    def relayout_step(self, crash: Crash) -> RoundRecord:
        """Restart with another task layout. With a lost round waiting (``point="redo"`` loses
        one first) the run must fail with TaskLayoutChangedError and commit nothing of the
        re-run; the campaign then restores the layout and the next run re-writes the round."""
        lost = self.lose_a_decided_batch() if crash.point == "redo" else None
        old, new = self.layout, self._other_layout(crash.how)
        started, before = time.monotonic(), self.commit_ids()
        committed_before = max(before, default=-1)
        sink_newest = self._sink_newest()
        waiting = self._lost_batch()
        # A lost round the sink recorded, or a decided batch the broker aborted that this run's
        # recovery will find lost: the run must be refused. Otherwise it continues; a refusal is
        # accepted only with the lost round in the log as its evidence.
        redo = waiting.batch_id if waiting is not None else lost
        expected = ["relayout-refused"] if redo is not None else ["relayout", "relayout-refused"]
        self._use_layout(new)
        driver = self.launch()
        what = f"round {len(self.result.rounds) + 1} (relayout {old.name} -> {new.name})"
        shown = self._wait_layout_shown(driver, new, sink_newest, what)
        landed: list[str] = []
        killed = self._end_randomly(driver, landed) if shown else 0
        code = self.wait_exit(driver, self.round_timeout, what)
        n = len(self.result.rounds) + 1
        observed, crash_ms = "", killed
        if shown and committed_before >= 0:  # a change only if the old layout ran before
            observed = "relayout"
            outcome = (f"continued: batch {shown[0]} decided with {shown[1]} task partitions "
                       f"({new.name}, before {old.name})")
        elif shown:
            outcome = f"batch {shown[0]} decided with {new.name}, but no batch ran before it"
        if not killed:
            reason = self._failure_reason(driver, code, what)
            refused = self._refused(driver, STEP_ERRORS["relayout-refused"])
            st = self.commit_log().batch_state(refused[0]) if refused else None
            evidence = not shown and st is not None and bool(st.redo_partitions)
            if evidence:
                observed = "relayout-refused"
                outcome = (f"refused: {refused[1]} (batch {refused[0]}'s lost task partitions "
                           f"{sorted(st.redo_partitions)} still wait for their re-write)")
            else:
                outcome = (outcome + "; then " if shown else "") + f"failed: {reason}"
            crash_ms = int(time.time() * 1000)
            self._record_failure(n, reason, driver, what, expected=evidence)
        else:
            outcome += ", then killed (random time)"
        if self._rolled_back is not None:
            self._skip_round(driver, self._rolled_back, started, before, crash_ms)
            before = self.commit_ids()  # one run, two records: the second is no recovery
        rec = self._step_round(f"relayout:{old.name}->{new.name}", started, committed_before,
                               before, crash_ms, outcome, asked=[], landed=landed,
                               expected=expected, observed=observed)
        if observed == "relayout-refused":
            self._use_layout(old)
            return self.restore_layout(refused[0], last=crash.last)  # type: ignore[index]
        return rec

    def lose_a_decided_batch(self) -> int | None:
        """A run with a short transaction timeout, killed right after a decision and kept down
        until the broker aborted every decided transaction (the next run finds them lost).
        Returns that batch, or None when the kill did not land (a query failure first)."""
        n = len(self.result.rounds) + 1
        started, before = time.monotonic(), self.commit_ids()
        committed_before = max(before, default=-1)
        marker = self.markers / f"round{n:03d}.fired"
        driver = self.launch(self.kill_rules("after_decision", committed_before + 1, marker),
                             transaction_timeout_ms=LOSS_TIMEOUT_MS)
        what = f"round {n} (lose a decided batch)"
        code = self.wait_exit(driver, self.round_timeout, what)
        landed: list[str] = []
        batch = None
        if code == -9 and marker.exists():
            crash_ms = self._fired_at_ms(marker)
            self.result.kills_by_point["after_decision"] = \
                self.result.kills_by_point.get("after_decision", 0) + 1
            landed.append("kill:after_decision")
            state = self.commit_log().latest()
            if state is None or state.pending is None:
                raise self._fail(f"{what}: killed after a decision, but the sink's log has no "
                                 f"decided, unfinished batch ({state})", driver)
            ended = self.wait_aborted_by_broker(state.pending.decision,
                                                LOSS_TIMEOUT_MS / 1000 + 90)
            batch = state.batch_id
            outcome = (f"killed at after_decision of batch {batch}; the broker aborted its "
                       f"{len(ended)} decided transaction(s) at their timeout "
                       f"({sorted({v[0] for v in ended.values()})})")
        else:
            reason = self._failure_reason(driver, code, what)
            outcome, crash_ms = f"failed: {reason}", int(time.time() * 1000)
            self._record_failure(n, reason, driver, what)
        self._step_round("relayout:lose-a-batch", started, committed_before, before, crash_ms,
                         outcome, asked=["kill:after_decision"], landed=landed)
        return batch

    def restore_layout(self, batch: int, last: bool = False) -> RoundRecord:
        """The run after a TaskLayoutChangedError, with the layout restored: it must re-write
        ``batch``'s lost round as the batch's next round, with the lost round's task layout.
        ``last``: that run is the campaign's final run."""
        started, before = time.monotonic(), self.commit_ids()
        committed_before = max(before, default=-1)
        lost_round = self.commit_log().batch_state(batch).last  # type: ignore[union-attr]
        driver = self.launch_final() if last else self.launch()
        what = f"round {len(self.result.rounds) + 1} (layout {self.layout.name} restored)"

        def complete() -> bool:
            st = self.commit_log().batch_state(batch)
            return st is not None and st.complete and batch in self.commit_ids()
        self._watch(driver, complete, what, f"batch {batch} not complete")
        landed: list[str] = []
        killed, code, final_ms = 0, 0, 0
        if last:
            driver, final_ms = self._end_final(driver, what)
        else:
            killed = self._end_randomly(driver, landed)
            code = self.wait_exit(driver, self.round_timeout, what)
        st = self.commit_log().batch_state(batch)
        rewritten = sorted(c.partition_id for c in st.last.decision) if st else []
        lost = sorted(c.partition_id for c in lost_round.lost)
        evidence = (st is not None and st.complete and len(st.rounds) > lost_round.number + 1
                    and rewritten == lost and st.last.layout is not None
                    and lost_round.layout is not None
                    and sorted(st.last.layout) == sorted(lost_round.layout))
        outcome = (f"batch {batch} complete: round {st.last.number} re-wrote task partitions "
                   f"{rewritten} with the lost round's layout ({self.layout.name})"
                   if evidence else f"batch {batch} not re-written as lost: {st}"[:300])
        outcome, crash_ms = self._run_ended(driver, what, outcome, killed, code, final_ms)
        rec = self._step_round(f"relayout:restore-{self.layout.name}", started,
                               committed_before, before, crash_ms, outcome, asked=[],
                               landed=landed, expected=["layout-restored"],
                               observed="layout-restored" if evidence else "")
        if last:
            self.close_rounds(before, driver)
        return rec

    # -- rolled-back checkpoint

    def _source_ends(self, line: str) -> dict[int, int]:
        """The input topic's offsets in one source line of ``offsets/N``."""
        data = kafka_offsets(line)
        if data is None:
            return {}
        return {p: off for (t, p), off in from_offset_json(
            {k: v for k, v in data.items() if not str(k).startswith("txkafka:")}).items()
            if t == self.source}

    def _committed_ends(self) -> dict[int, int]:
        """Where the newest batch Spark committed ends, per input partition."""
        n = self.committed()
        entry = SparkCheckpoint(str(self.ck)).read_offsets(n) if n >= 0 else None
        return self._source_ends(entry.sources[0]) if entry is not None and entry.sources else {}

    def catch_up_round(self) -> RoundRecord:
        """With the feeder paused: a run that reads the whole input, then is killed (the newest
        committed batch then ends at the input's end)."""
        started, before = time.monotonic(), self.commit_ids()
        committed_before = max(before, default=-1)
        target = self.kafka.end_offsets(self.source)
        driver = self.launch()
        what = f"round {len(self.result.rounds) + 1} (catch up)"

        def at_end() -> bool:
            ends = self._committed_ends()
            return bool(ends) and all(ends.get(p, -1) >= off for p, off in target.items())
        self._watch(driver, at_end, what, f"the input's end {target} not committed")
        landed: list[str] = []
        killed = self._end_randomly(driver, landed)
        code = self.wait_exit(driver, self.round_timeout, what)
        outcome, crash_ms = f"read the whole input {target}, then killed (random time)", killed
        if not killed:
            reason = self._failure_reason(driver, code, what)
            outcome, crash_ms = f"failed: {reason}", int(time.time() * 1000)
            self._record_failure(len(self.result.rounds) + 1, reason, driver, what)
        return self._step_round("rollback:catch-up", started, committed_before, before, crash_ms,
                                outcome, asked=["random"], landed=landed)

    def roll_back(self) -> tuple[int, dict[Path, bytes]]:
        """Remove the newest committed batch's ``offsets/N`` and ``commits/N`` with their .crc
        files (and any later offsets file of a killed run), as an operator repairing a corrupt
        last offsets file does. Returns N and a copy of every removed file."""
        newest = self.committed()
        if newest < 0:
            raise self._fail("a rollback needs a committed batch; none yet")
        kept: dict[Path, bytes] = {}
        for folder in ("offsets", "commits"):
            for f in sorted((self.ck / folder).iterdir()):
                bid = f.name[1:-4] if f.name.startswith(".") and f.name.endswith(".crc") \
                    else f.name
                if bid.isdigit() and int(bid) >= newest:
                    kept[f] = f.read_bytes()
                    f.unlink()
        return newest, kept

    def _decision_files(self) -> set[str]:
        d = self.ck / "txkafka-sink" / "log"
        return {f.name for f in d.iterdir() if f.name.endswith(".decision.json")} \
            if d.exists() else set()

    def roll_back_unchanged(self) -> int:
        """Roll back the newest committed batch while the input stays as it is (the feeder
        stopped): the next run, a ``relayout`` step's, re-plans it with the same offsets and must
        skip it, recorded as a round of its own. Returns the batch."""
        assert self.feeder is None or self.feeder.stopped, "the input must not change"
        self._rolled_back, _kept = self.roll_back()
        return self._rolled_back

    def _skip_round(self, driver: PipelineDriver, newest: int, started: float,
                    before: set[int], crash_ms: int) -> RoundRecord:
        """The rollback outcome of a run that re-planned the rolled-back batch ``newest`` with
        unchanged input: the skip logged and Spark's commits/N written again."""
        self._rolled_back = None
        skip_line = f"batch {newest}: {SKIP_LOGGED}"
        skipped = skip_line in driver.output() and (self.ck / "commits" / str(newest)).exists()
        outcome = (f"skipped: '{skip_line}' logged, commits/{newest} written again" if skipped
                   else f"batch {newest} re-planned without the skip logged")
        return self._step_round(f"rollback:same:batch-{newest}", started,
                                max(before, default=-1), before, crash_ms, outcome, asked=[],
                                landed=[], expected=["rollback-skipped"],
                                observed="rollback-skipped" if skipped else "")

    def rollback_step(self, crash: Crash) -> RoundRecord:
        """Roll the checkpoint back by its newest batch and restart. ``point="same"``: the
        feeder pauses and a run catches up first, so the re-planned batch reads the same offsets
        (skipped, logged); otherwise new input arrives first, so it reads others (refused with
        CheckpointMismatchError, then recovered ``how``: "restore" or "savepoint")."""
        same = crash.point == "same"
        assert self.feeder is not None
        if same:
            self.feeder.pause()
        try:
            if same:
                self.catch_up_round()
            started, before_rollback = time.monotonic(), self.commit_ids()
            newest, kept = self.roll_back()
            ends = self._source_ends(next(
                (b.decode().splitlines()[2] for f, b in kept.items()
                 if f.parent.name == "offsets" and f.name == str(newest)), ""))
            if not same:
                self._wait_input_past(ends)
            before = self.commit_ids()
            decisions = self._decision_files()
            driver = self.launch()
            what = f"round {len(self.result.rounds) + 1} (rollback of batch {newest})"
            observed, outcome, crash_ms, landed = self._run_after_rollback(
                driver, newest, same, decisions, what)
        finally:
            if same:
                self.feeder.resume()
        rec = self._step_round(f"rollback:{'same' if same else 'other'}:batch-{newest}", started,
                               max(before_rollback, default=-1), before, crash_ms, outcome,
                               asked=[], landed=landed,
                               expected=["rollback-skipped", "rollback-refused"],
                               observed=observed)
        if observed != "rollback-refused":
            return rec
        if crash.how == "savepoint":
            return self.move_by_savepoint(f"the CheckpointMismatchError of round {rec.number}")
        for f, data in kept.items():  # the documented repair: the removed files restored
            f.write_bytes(data)
        return self._after_restore(newest, crash.layout)

    def _wait_input_past(self, ends: dict[int, int], timeout: float = 120.0) -> None:
        """Until the (running) feeder committed input after ``ends`` in some partition."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = self.kafka.end_offsets(self.source)
            if any(now.get(p, 0) > off for p, off in ends.items()):
                return
            time.sleep(0.5)
        raise self._fail(f"no input after {ends} within {timeout:.0f}s (feeder stuck?)")

    def _run_after_rollback(self, driver: PipelineDriver, newest: int, same: bool,
                            decisions: set[str], what: str) -> tuple[str, str, int, list[str]]:
        """Watch the run after a rollback until it progressed past the rolled-back batch (then
        kill it) or failed; (observed, outcome, crash ms, landed)."""
        assert self.feeder is not None
        skip_line = f"batch {newest}: {SKIP_LOGGED}"
        # An aggregation's rolled-back batch may be a no-data batch that a restart does not plan
        # again until data comes: then the feeder resumes after a while.
        resume_at = time.monotonic() + min(90.0, self.round_timeout / 2)
        resumed = [not same]

        def past_it() -> bool:
            if not resumed[0] and (skip_line in driver.output() or time.monotonic() > resume_at):
                self.feeder.resume()  # type: ignore[union-attr]
                resumed[0] = True
            return resumed[0] and any(b > newest for b, _rows in driver.batches())
        self._watch(driver, past_it, what,
                    f"neither progress past batch {newest} nor a failure")
        landed: list[str] = []
        killed = self._end_randomly(driver, landed)
        code = self.wait_exit(driver, self.round_timeout, what)
        skipped = skip_line in driver.output() and (self.ck / "commits" / str(newest)).exists()
        if killed:
            if skipped:
                return ("rollback-skipped", f"skipped: '{skip_line}' logged, commits/{newest} "
                        "written again, later batches committed; then killed (random time)",
                        killed, landed)
            return "", f"progressed past batch {newest} without the skip logged", killed, landed
        n = len(self.result.rounds) + 1
        reason = self._failure_reason(driver, code, what)
        refused = self._refused(driver, STEP_ERRORS["rollback-refused"])
        evidence = (refused is not None and refused[0] >= newest
                    and self._decision_files() == decisions)
        self._record_failure(n, reason, driver, what, expected=evidence)
        if evidence:
            return ("rollback-refused", f"refused: {refused[1]} (no decision written)",  # type: ignore[index]
                    int(time.time() * 1000), landed)
        return "", f"failed: {reason}", int(time.time() * 1000), landed

    def _after_restore(self, restored: int, layout: str | None = None) -> RoundRecord:
        """The run after the removed files were restored: it continues after them. With
        ``layout`` it also runs another task layout: a relayout round of the same run."""
        started, before = time.monotonic(), self.commit_ids()
        committed_before = max(before, default=-1)
        old = self.layout
        new = self._other_layout(layout) if layout else None
        if new is not None:
            self._use_layout(new)
        driver = self.launch()
        what = f"round {len(self.result.rounds) + 1} (checkpoint files restored)"
        self.wait_progress(driver, restored, self.round_timeout, what)
        shown = self._wait_layout_shown(driver, new, restored, what) if new else None
        landed: list[str] = []
        killed = self._end_randomly(driver, landed)
        code = self.wait_exit(driver, self.round_timeout, what)
        progressed = [b for b, _rows in driver.batches() if b > restored]
        evidence = bool(progressed) and \
            self._refused(driver, STEP_ERRORS["rollback-refused"]) is None
        outcome, crash_ms = self._run_ended(
            driver, what, f"continued after the restored batch {restored}: committed batch "
            f"{max(progressed, default=None)}", killed, code)
        rec = self._step_round("rollback:restored", started, committed_before, before, crash_ms,
                               outcome, asked=[], landed=landed,
                               expected=["rollback-restored"],
                               observed="rollback-restored" if evidence else "")
        if new is None:
            return rec
        shown = shown or self._layout_shown(new, restored)
        # The same run as the round just recorded: its commits are not a recovery of that
        # round's crash, so the orphan check waits for the next run (commits as of now).
        return self._step_round(
            f"relayout:{old.name}->{new.name}", started, committed_before, self.commit_ids(),
            crash_ms,
            (f"continued: batch {shown[0]} decided with {shown[1]} task partitions ({new.name}, "
             f"before {old.name}), in the run of round {rec.number}" if shown else
             f"no batch decided with {new.name} in the run of round {rec.number}"),
            asked=[], landed=[], expected=["relayout"], observed="relayout" if shown else "")

    # -- move to a new checkpoint via a savepoint

    def savepoint_step(self, crash: Crash) -> RoundRecord:
        """The driver killed (at ``crash.point``, mid-batch, or at a random moment; or, with
        ``how="stopped"``, the query the previous round ended), then moved to a changed query on
        a new checkpoint by a savepoint."""
        if self.mode != "map":
            raise ValueError("savepoint steps run in map campaigns: a savepoint carries no "
                             "aggregation state, so a window open at the move would be counted "
                             "by both queries (docs/operations.md, Savepoints)")
        if crash.how == "stopped" and self.result.rounds:
            ended = self.result.rounds[-1]
        else:
            ended = self.round(Crash("point", crash.point) if crash.point else Crash("random"))
        return self.move_by_savepoint(f"round {ended.number} ({ended.outcome[:80]})",
                                      last=crash.last)

    def _settle_pending(self, open_after: int) -> None:
        """The rounds waiting for their recovery check, checked now: ``open_after`` of the
        crashed runs' transactions were open after the recovery."""
        for rec in self._pending.rounds:
            rec.stale_open = open_after
        self.result.stale_checks += len(self._pending.rounds)
        self.result.stale_open += open_after
        self._pending = _Pending()

    def _batch0_start(self) -> dict[int, int]:
        """Where the checkpoint's batch 0 started reading the input (its resolved start)."""
        entry = SparkCheckpoint(str(self.ck)).read_offsets(0)
        if entry is None or not entry.sources:
            return {}
        data = kafka_offsets(entry.sources[0]) or {}
        start = data.get(BATCH_START_KEY)
        if not isinstance(start, dict):
            return {}
        return {p: off for (t, p), off in from_offset_json(start).items() if t == self.source}

    def move_by_savepoint(self, after: str, last: bool = False) -> RoundRecord:
        """``txkafka savepoint create`` of the stopped query, then a CHANGED query (another
        projection and layout) on a new checkpoint from it, writing the same output topic.
        ``last``: the moved query's run is the campaign's final run."""
        started = time.monotonic()
        old_ck, old_prefix = self.ck, self.sink_prefix()
        sp = self.workdir / f"savepoint{len(self.checkpoints)}.json"
        try:
            savepoints.create(str(old_ck), str(sp), self.kafka.conf,
                              quiet_period_s=SAVEPOINT_QUIET_S)
        except Exception as e:  # noqa: BLE001 - a refusal is the campaign's finding
            raise self._fail(f"savepoint of {old_ck.name} after {after} refused: "
                             f"{type(e).__name__}: {e}") from None
        # The savepoint resolved the old sink: that is the recovery of the rounds before it.
        left_open = self.kafka.open_transactions(old_prefix)
        self._settle_pending(len(left_open))
        saved = read_savepoint(str(sp))
        positions = {p: off for (t, p), off in saved.positions.items() if t == self.source}
        self.ck = self.workdir / f"ck{len(self.checkpoints) + 1}"
        self.checkpoints.append(self.ck)
        self.result.checkpoints = len(self.checkpoints)
        self.query, self.savepoint = "project", sp
        others = [lay for lay in LAYOUTS["map"] if lay != self.layout]
        if not self.result.order_note:  # keep the map's order check while it still holds
            others = [lay for lay in others if not lay.reorders]
        self._use_layout(self.rng.choice(others))
        driver = self.launch_final() if last else self.launch()
        what = f"round {len(self.result.rounds) + 1} (moved to {self.ck.name})"
        landed: list[str] = []
        killed, code, final_ms = 0, 0, 0
        if last:
            driver, final_ms = self._end_final(driver, what)
        else:
            self.wait_progress(driver, -1, self.round_timeout, what)
            killed = self._end_randomly(driver, landed)
            code = self.wait_exit(driver, self.round_timeout, what)
        start = self._batch0_start()
        evidence = bool(positions) and start == positions and not left_open \
            and self.committed() >= 0
        outcome = (f"savepoint of {old_ck.name} after {after}: batch {saved.batch_id} "
                   f"({saved.origin.get('basis')}), resolved {saved.resolved}, "
                   f"{len(left_open)} transaction(s) of the old sink open after it; the "
                   f"{self.query} query with layout {self.layout.name} on {self.ck.name} "
                   f"started at {start} (savepoint {positions}) and committed batch "
                   f"{self.committed()}")
        outcome, crash_ms = self._run_ended(driver, what, outcome, killed, code, final_ms)
        rec = self._step_round(f"savepoint:move-to-{self.ck.name}", started, -1, set(),
                               crash_ms, outcome, asked=[], landed=landed,
                               expected=["savepoint-moved"],
                               observed="savepoint-moved" if evidence else "")
        if last:
            self.close_rounds(set(), driver)
        return rec

    # ------------------------------------------------------------------ checks

    def stale_open(self, before_ms: int) -> list[str]:
        """Open transactions of the sink (of every checkpoint the campaign used) that started
        before ``before_ms`` (a crash)."""
        listed = [t for prefix in self.sink_prefixes()
                  for t in self.kafka.open_transactions(prefix)]
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
        driver, _ended = self._end_final(self.launch_final(), "final run")
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
                                  for prefix in self.sink_prefixes()
                                  for t in self.kafka.open_transactions(prefix)]
        self.verify()
        self.result.rerun_rounds = self.result.batches = 0
        for ck in self.checkpoints:
            if not (ck / "txkafka-sink").exists():
                continue
            log = SinkCommitLog(str(ck))
            self.result.rerun_rounds += sum(
                1 for b in log.batch_ids() if len((log.batch_state(b) or _NoRounds).rounds) > 1)
            newest = SparkCheckpoint(str(ck)).latest_committed_batch()
            self.result.batches += newest + 1 if newest is not None else 0
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
                # Every checkpoint's output is in the one output topic: verified as a whole.
                rep = verify(conf, self.source, self.sink,
                             check_order=not self.result.order_note)
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
            if any(c.last for c in crashes[:-1]):
                raise ValueError("only the last crash can run the final run (Crash.last)")
            for crash in crashes:
                if crash.kind == "point" and crash.point == "during_recovery":
                    self.ensure_pending_decision()
                self.round(crash)
            return self.conclude() if self._final_done else self.finish()
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
