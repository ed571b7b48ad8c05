"""The ``tasks`` suite of ``txkafka bench``: what a micro-batch costs as its write tasks multiply.

Kafka -> txkafka source -> ``repartition(P)`` -> sink, Trigger.AvailableNow, a few batches of
``--tasks-batch-rows`` rows per run, at every P of ``--tasks-partitions``, for: Spark's built-in
``kafka`` sink, a Python data source writer that only drains its input (the floor any Python sink
pays; defined here and registered as its own format), ``mapInArrow`` identity into Spark's ``noop``
sink (a Python stage without a data source), txkafka at_least_once and txkafka exactly_once. The
figure is the median per-batch ``addBatch`` time (Spark's progress ``durationMs``) over every batch
of every run; the systems run side by side in rotated order at each P.

With ``--trace`` Spark writes an event log, and each run's write stage is broken down per task from
it: Spark's task metrics (scheduler delay, deserialisation, run time, result serialisation) and the
Python runner's own timings (worker boot, init = reading the pickled function and writer, Python
processing), plus the drain writer's timestamps inside ``write()``.

The bench's own Python data sources live here too: the drain writer (also the sink suite's) and the
read suite's floor source.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import tempfile
import time
import uuid
from typing import Any, Iterator

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    DataSourceStreamReader, InputPartition, WriterCommitMessage)

DRAIN_FORMAT = "txkafka_bench_drain"
FLOOR_FORMAT = "txkafka_bench_floor"

# System names, in the order tables and charts list them.
SYSTEMS = ["builtin", "drain", "mapinarrow_noop", "txkafka_at_least_once", "txkafka_exactly_once",
           "txkafka_exactly_once_librdkafka"]
LABELS = {"builtin": "Spark built-in kafka sink", "drain": "Python writer, drain only",
          "mapinarrow_noop": "mapInArrow identity + noop",
          "txkafka_at_least_once": "txkafka at_least_once",
          "txkafka_exactly_once": "txkafka exactly_once",
          "txkafka_exactly_once_librdkafka": "txkafka exactly_once, producer=librdkafka",
          # result files from before the systems named the default producer
          "txkafka_exactly_once_wire": "txkafka exactly_once, producer=txkafka"}


# ----------------------------------------------------------------------------- the drain-only writer

class DrainCommit(WriterCommitMessage):
    """A drain task's row count, its timestamps inside ``write()`` (epoch seconds) and its Python
    worker's CPU time (s) and pid at entry and return."""

    def __init__(self, rows: int, task_attempt_id: int, entered: float, first_batch: float | None,
                 drained: float, pid: int, cpu_entered: float, cpu_drained: float,
                 frozen: int) -> None:
        self.rows = rows
        self.task_attempt_id = task_attempt_id
        self.entered = entered
        self.first_batch = first_batch
        self.drained = drained
        self.pid = pid
        self.cpu_entered = cpu_entered
        self.cpu_drained = cpu_drained
        self.frozen = frozen  # objects in the worker's frozen generation (gc.freeze)


class DrainWriter(DataSourceStreamArrowWriter):
    """Consumes every Arrow batch and writes nothing: the cost of a Python sink's task itself.

    ``commit`` appends each batch's row count and task timestamps to a JSON-lines ledger, so the
    benchmark can prove every row was drained (a writer that skipped its input would be fast)."""

    def __init__(self, ledger: str) -> None:
        self.ledger = ledger

    def write(self, iterator: Iterator[Any]) -> DrainCommit:
        from pyspark import TaskContext

        entered, cpu_entered = time.time(), time.process_time()
        ctx = TaskContext.get()
        rows, first = 0, None
        for batch in iterator:
            if first is None:
                first = time.time()
            rows += batch.num_rows
        return DrainCommit(rows, ctx.taskAttemptId() if ctx else -1, entered, first, time.time(),
                           os.getpid(), cpu_entered, time.process_time(), gc.get_freeze_count())

    def commit(self, messages: list, batchId: int) -> None:
        tasks = [[m.task_attempt_id, m.rows, m.entered, m.first_batch, m.drained, m.pid,
                  m.cpu_entered, m.cpu_drained, m.frozen] for m in messages
                 if isinstance(m, DrainCommit)]
        with open(self.ledger, "a") as fh:
            fh.write(json.dumps({"batch": batchId, "rows": sum(t[1] for t in tasks),
                                 "tasks": tasks}) + "\n")

    def abort(self, messages: list, batchId: int) -> None:
        pass


class BatchDrainWriter(DataSourceArrowWriter):
    """The drain writer for a batch ``df.write`` (the sink suite's floor): the same tasks, one
    ledger line for the whole write."""

    def __init__(self, ledger: str) -> None:
        self.stream = DrainWriter(ledger)

    def write(self, iterator: Iterator[Any]) -> DrainCommit:
        return self.stream.write(iterator)

    def commit(self, messages: list) -> None:
        self.stream.commit(messages, -1)

    def abort(self, messages: list) -> None:
        pass


class DrainDataSource(DataSource):
    """Registered as ``txkafka_bench_drain``; option ``ledger``: the file ``commit`` appends to."""

    @classmethod
    def name(cls) -> str:
        return DRAIN_FORMAT

    def streamWriter(self, schema, overwrite: bool) -> DrainWriter:
        return DrainWriter(self.options["ledger"])

    def writer(self, schema, overwrite: bool) -> BatchDrainWriter:
        return BatchDrainWriter(self.options["ledger"])


class _FloorReader(DataSourceStreamReader):
    """One row, once: the least a Python streaming source can do."""

    def initialOffset(self) -> dict:
        return {"row": 0}

    def latestOffset(self) -> dict:
        return {"row": 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(0)] if end["row"] > start["row"] else []

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        yield (1,)


class FloorSource(DataSource):
    """Registered as ``txkafka_bench_floor``: a Python streaming source that imports nothing and
    reads one row. The read suite times its query's start beside txkafka's and Spark's Kafka
    source's: what Spark's Python streaming machinery costs any Python source."""

    @classmethod
    def name(cls) -> str:
        return FLOOR_FORMAT

    def schema(self) -> str:
        return "x int"

    def streamReader(self, schema) -> _FloorReader:
        return _FloorReader()


def read_ledger(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def identity_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow``'s identity function (module level: pickled by reference, as a sink is)."""
    yield from batches


# ----------------------------------------------------------------------------- CPU by process

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat(pid: int) -> tuple[int, int, float, float] | None:
    """(parent pid, start time, own CPU s, reaped children's CPU s) from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) "
    own = (int(fields[11]) + int(fields[12])) / _TICK
    children = (int(fields[13]) + int(fields[14])) / _TICK
    return int(fields[1]), int(fields[19]), own, children


Snapshot = dict[Any, tuple[str, float]]


class CpuMeter:
    """CPU seconds used by the Spark JVM, the Python processes it started (executor workers, and
    the driver-side planner and commit processes), this process and the broker. CPU time, unlike a
    batch's wall time, barely depends on what else the machine runs, so per-task costs measured this
    way hold on a loaded machine. Linux only (/proc); ``snapshot`` is None elsewhere.

    Counted per process (pid and start time): PySpark's daemon ignores SIGCHLD, so a worker that
    exits takes its CPU time with it; a process that exits between two snapshots is left out, and
    never makes a difference negative."""

    def __init__(self, jvm_pid: int, broker_pids: list[int]) -> None:
        self.jvm_pid = jvm_pid
        self.broker_pids = broker_pids

    @classmethod
    def for_session(cls, spark, broker_pids: list[int]) -> "CpuMeter | None":
        """A meter of this SparkSession's JVM (local mode: driver and executors), None off Linux."""
        if not os.path.isdir("/proc/self"):
            return None
        return cls(int(spark._jvm.java.lang.ProcessHandle.current().pid()), broker_pids)

    def snapshot(self) -> Snapshot | None:
        if not os.path.isdir("/proc/self"):
            return None
        stats: dict[int, tuple[int, int, float, float]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = _proc_stat(int(name))
                if st is not None:
                    stats[int(name)] = st
        if self.jvm_pid not in stats:
            return None
        kids: dict[int, list[int]] = {}
        for pid, st in stats.items():
            kids.setdefault(st[0], []).append(pid)
        jvm = stats[self.jvm_pid]
        out: Snapshot = {"jvm": ("jvm", jvm[2]),
                         # Python processes the JVM started and reaped (none stay long)
                         "jvm_children": ("python_exited", jvm[3]),
                         "self": ("bench_process", sum(os.times()[:2]))}
        for pid in self.broker_pids:
            if pid in stats:
                out[(pid, stats[pid][1])] = ("broker", stats[pid][2])
        todo = list(kids.get(self.jvm_pid, []))
        while todo:
            pid = todo.pop()
            todo += kids.get(pid, [])
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read()
            except OSError:
                continue
            # Spark starts one daemon per worker module: `pyspark.worker` runs tasks; the others
            # (write_into_data_source, the streaming sink's commit, lookups) run on the driver.
            group = ("python_workers" if cmd.rstrip(b"\0").endswith(b"pyspark.worker")
                     else "python_driver_side")
            out[(pid, stats[pid][1])] = (group, stats[pid][2] + stats[pid][3])
        return out


GROUPS = ["jvm", "python_workers", "python_driver_side", "python_exited", "bench_process", "broker"]


def cpu_delta(before: Snapshot | None, after: Snapshot | None) -> dict[str, float]:
    """CPU seconds by group between two snapshots, over the processes alive at the second."""
    if not before or not after:
        return {}
    out = dict.fromkeys(GROUPS, 0.0)
    for key, (group, cpu) in after.items():
        prior = before.get(key)
        out[group] += cpu - (prior[1] if prior else 0.0)
    return {g: round(v, 3) for g, v in out.items()}


# ----------------------------------------------------------------------------- one run

def tasks_run(spark, system: str, k, src_topic: str, rows: int, batch_rows: int, tasks: int,
              workdir: str, meter: CpuMeter | None = None) -> dict[str, Any]:
    """One query of ``system`` at ``tasks`` write tasks; returns its per-batch addBatch times (ms)
    and its query id. Every row read must reach the sink: counted by read_committed for the
    Kafka sinks, by the drain writer's ledger for it."""
    from .bench_runs import _SINKS, _run_query, check_count

    out = k.topic("bench-tasks-out", 4) if system in _SINKS else None
    ledger = os.path.join(workdir, f"drain-{uuid.uuid4().hex[:8]}.jsonl")
    holder: dict[str, Any] = {}

    def start():
        from .bench_runs import TXKAFKA_READ_OPTIONS

        src = (spark.readStream.format("txkafka").options(**k.options)
               .option("subscribe", src_topic).option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", str(batch_rows)).options(**TXKAFKA_READ_OPTIONS)
               .load())
        df = src.selectExpr("key", "value").repartition(tasks)
        if system == "mapinarrow_noop":
            df = df.mapInArrow(identity_batches, df.schema)
        holder["checkpoint"] = tempfile.mkdtemp(dir=workdir)
        w = (df.writeStream.trigger(availableNow=True)
             .option("checkpointLocation", holder["checkpoint"]))
        if system == "drain":
            w = w.format(DRAIN_FORMAT).option("ledger", ledger)
        elif system == "mapinarrow_noop":
            w = w.format("noop")
        else:
            fmt, options = _SINKS[system]
            w = (w.format(fmt).options(**k.options)
                 .option("topic", out).options(**options))
        q = w.start()
        holder["id"] = q.id
        return q

    what = f"tasks {system} at {tasks} tasks"
    cpu_before = meter.snapshot() if meter else None
    _, q = _run_query(what, start, rows, 1800,
                      (lambda: k.wait_visible(what, out, rows)) if out else None)
    cpu = cpu_delta(cpu_before, meter.snapshot() if meter else None)
    if out:
        k.check_output(what, out, rows)
    drained = read_ledger(ledger)
    if system == "drain":
        check_count(f"{what}, rows its commits account for", sum(b["rows"] for b in drained), rows)
    data = [p for p in q.recentProgress if p.get("numInputRows")]
    # Timed: full batches after the query's first, which also pays the query's one-time costs
    # (its planner and sink processes, the sink's checks at start); a long-running stream pays
    # them once. A short last batch (the rate limit's remainder) is left out as well.
    timed = [p for p in data[1:] if p["numInputRows"] >= 0.9 * batch_rows]
    counted = {p["batchId"] for p in timed}
    return {"query_id": holder["id"], "add_batch_ms": [p["durationMs"]["addBatch"] for p in timed],
            "batch_rows": [p["numInputRows"] for p in timed], "batch_ids": sorted(counted),
            "add_batch_by_id": {p["batchId"]: p["durationMs"]["addBatch"] for p in timed},
            "first_batch_ms": data[0]["durationMs"]["addBatch"] if data else None,
            "batches": len(data), "cpu_s": cpu,
            "commit_ms": commit_timings(holder["checkpoint"], counted)
            if system.startswith("txkafka_exactly_once") else [],
            "drain_tasks": [t for b in drained if b["batch"] in counted for t in b["tasks"]]}


def commit_timings(checkpoint: str, batch_ids: set[int]) -> list[dict[str, float]]:
    """The driver's commit of each timed batch, from the sink's commit log (its outcome records):
    DescribeTransactions + the decision record (``validate_and_decide_ms``) and the pipelined
    EndTxn calls (``end_txn_ms``), with the batch's transaction count."""
    from ..connector.sink.commit_log import SinkCommitLog

    log = SinkCommitLog(checkpoint)
    listing = log.listing()
    out = []
    for b in sorted(batch_ids):
        st = log.batch_state(b, listing)
        if st is None or st.empty or not st.rounds or not st.last.outcome:
            continue
        o = st.last.outcome
        out.append({"batch": b, "transactions": len(st.last.decision),
                    "validate_and_decide_ms": o.get("validate_and_decide_ms"),
                    "end_txn_ms": o.get("end_txn_ms")})
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A system's figures at one P: median addBatch over every timed batch of every run, and
    rows/s at that median."""
    ms = [x for r in runs for x in r["add_batch_ms"]]
    n = [x for r in runs for x in r["batch_rows"]]
    if not ms:
        raise RuntimeError("tasks suite: no full batch after the first was timed; raise "
                           "--tasks-batches")
    batch_s = statistics.median(ms) / 1000.0
    out = {"batch_s": batch_s, "rows_s": statistics.median(n) / batch_s if batch_s else 0.0,
           "runs_ms": [r["add_batch_ms"] for r in runs],
           "first_batch_ms": [r["first_batch_ms"] for r in runs]}
    commits = [c for r in runs for c in r.get("commit_ms") or []]
    if commits:  # exactly_once: the driver's commit of a batch, medians
        for key in ("validate_and_decide_ms", "end_txn_ms"):
            vals = [c[key] for c in commits if c.get(key) is not None]
            if vals:
                out[f"commit_{key}"] = statistics.median(vals)
    return out


def tasks_ratios(tasks: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(name, value, target) of the issue's targets: exactly_once against the drain-only writer at
    every P (<= 1.1), against the built-in sink at 200 tasks (<= 3.0) and at 4 or fewer (<= 1.0)."""
    from .bench_runs import EOS_LABELS

    out = []
    for point in tasks.get("points", []):
        p, s = point["tasks"], point["systems"]
        for system, label in EOS_LABELS.items():
            eos = s.get(system, {}).get("batch_s")
            if eos is None:
                continue
            if "drain" in s:
                out.append((f"tasks: {label} / drain-only writer at {p} tasks",
                            eos / s["drain"]["batch_s"], 1.1))
            if "builtin" in s and (p == 200 or p <= 4):
                out.append((f"tasks: {label} / built-in sink at {p} tasks",
                            eos / s["builtin"]["batch_s"], 3.0 if p == 200 else 1.0))
    return out


# ----------------------------------------------------------------------------- the trace

def eventlog_files(folder: str) -> list[str]:
    """The session's event log files, in order: one file, or a rolling log's folder of parts
    (``events_<n>_<app>``)."""
    apps = [os.path.join(folder, f) for f in os.listdir(folder)]
    if not apps:
        raise RuntimeError(f"--trace: Spark wrote no event log in {folder}")
    app = max(apps, key=os.path.getmtime)
    if not os.path.isdir(app):
        return [app]
    parts = [f for f in os.listdir(app) if f.startswith("events_")]
    return [os.path.join(app, f) for f in sorted(parts, key=lambda f: int(f.split("_")[1]))]


# Spark's SQL metrics of a Python stage (PythonSQLMetrics), by their display names.
_PY_METRICS = {"time to start Python workers": "py_boot_ms",
               "time to initialize Python workers": "py_init_ms",
               "time to execute Python code": "py_processing_ms",
               "time to run Python workers": "py_total_ms"}


def _events(paths: list[str]) -> Iterator[dict]:
    for path in paths:
        with open(path) as fh:
            for line in fh:
                try:
                    yield json.loads(line)
                except ValueError:  # the last line of a log still being written
                    return


def write_stage_tasks(paths: list[str], query_ids: set[str]) -> dict[str, list[dict]]:
    """Per query id: one record per successful task of each job's last stage (the write stage:
    Spark numbers a job's stages parents first), with Spark's task metrics and the Python
    runner's timings in ms, and the job's and stages' wall times."""
    job_query: dict[int, str] = {}
    job_batch: dict[int, int] = {}
    job_stages: dict[int, list[int]] = {}
    stage_job: dict[int, int] = {}
    tasks: dict[int, list[dict]] = {}
    stage_wall: dict[int, float] = {}
    job_wall: dict[int, float] = {}
    job_submitted: dict[int, int] = {}
    for e in _events(paths):
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            props = e.get("Properties") or {}
            qid = props.get("sql.streaming.queryId")
            if qid in query_ids and props.get("streaming.sql.batchId") is not None:
                job_query[e["Job ID"]] = qid
                job_batch[e["Job ID"]] = int(props["streaming.sql.batchId"])
                job_stages[e["Job ID"]] = e["Stage IDs"]
                job_submitted[e["Job ID"]] = e["Submission Time"]
                for s in e["Stage IDs"]:
                    stage_job[s] = e["Job ID"]
        elif kind == "SparkListenerJobEnd" and e["Job ID"] in job_submitted:
            job_wall[e["Job ID"]] = e["Completion Time"] - job_submitted[e["Job ID"]]
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            if info["Stage ID"] in stage_job and info.get("Submission Time"):
                stage_wall[info["Stage ID"]] = info["Completion Time"] - info["Submission Time"]
        elif kind == "SparkListenerTaskEnd" and e.get("Stage ID") in stage_job:
            if (e.get("Task End Reason") or {}).get("Reason") != "Success":
                continue
            if e.get("Task Type") != "ResultTask":
                # A job of AQE's shuffle map stage alone also ends in a stage of its own: only a
                # write stage's tasks are result tasks.
                continue
            info, m = e["Task Info"], e.get("Task Metrics") or {}
            duration = info["Finish Time"] - info["Launch Time"]
            rec = {"task_id": info["Task ID"], "launch": info["Launch Time"],
                   "finish": info["Finish Time"], "duration_ms": duration,
                   "deserialize_ms": m.get("Executor Deserialize Time", 0),
                   "run_ms": m.get("Executor Run Time", 0),
                   "cpu_ms": m.get("Executor CPU Time", 0) / 1e6,
                   "result_serialize_ms": m.get("Result Serialization Time", 0),
                   "gc_ms": m.get("JVM GC Time", 0),
                   "shuffle_wait_ms": (m.get("Shuffle Read Metrics") or {}).get("Fetch Wait Time", 0)}
            rec["scheduler_delay_ms"] = max(0, duration - rec["run_ms"] - rec["deserialize_ms"]
                                            - rec["result_serialize_ms"]
                                            - info.get("Getting Result Time", 0))
            for acc in info.get("Accumulables") or []:
                key = _PY_METRICS.get(acc.get("Name"))
                if key is not None:
                    rec[key] = float(acc.get("Update") or 0)
            tasks.setdefault(e["Stage ID"], []).append(rec)
    out: dict[str, list[dict]] = {}
    for job, stages in job_stages.items():
        last = max(stages)
        for rec in tasks.get(last, []):
            rec["write_stage_wall_ms"] = stage_wall.get(last)
            rec["job_wall_ms"] = job_wall.get(job)
            rec["other_stages_wall_ms"] = sum(stage_wall.get(s, 0) for s in stages if s != last)
            rec["batch_id"] = job_batch[job]
        out.setdefault(job_query[job], []).extend(tasks.get(last, []))
    return out


def task_breakdown(records: list[dict], drain_tasks: list[list] | None = None) -> dict[str, Any]:
    """Medians (ms) of one system's write tasks at one P, and the write stage's wall time."""
    if not records:
        return {}
    keys = ["duration_ms", "scheduler_delay_ms", "deserialize_ms", "run_ms", "cpu_ms",
            "result_serialize_ms", "gc_ms", "shuffle_wait_ms", *_PY_METRICS.values()]
    out: dict[str, Any] = {"tasks": len(records)}
    for key in keys:
        vals = [r[key] for r in records if key in r]
        if vals:
            out[key] = round(statistics.median(vals), 2)
    walls = {(r["write_stage_wall_ms"], r["job_wall_ms"], r["other_stages_wall_ms"])
             for r in records if r.get("write_stage_wall_ms") is not None}
    if walls:
        out["write_stage_wall_ms"] = statistics.median(w[0] for w in walls)
        out["job_wall_ms"] = statistics.median(w[1] for w in walls if w[1] is not None)
        out["other_stages_wall_ms"] = statistics.median(w[2] for w in walls)
    if drain_tasks:
        # Inside the drain writer's write(), against the task's launch and finish (ms).
        by_id = {r["task_id"]: r for r in records}
        lead, first, drain, tail = [], [], [], []
        for tid, _rows, entered, first_batch, drained, *_ in drain_tasks:
            r = by_id.get(tid)
            if r is None:
                continue
            lead.append(entered * 1000 - r["launch"])
            if first_batch is not None:
                first.append((first_batch - entered) * 1000)
                drain.append((drained - first_batch) * 1000)
            tail.append(r["finish"] - drained * 1000)
        for key, vals in (("launch_to_write_ms", lead), ("write_to_first_batch_ms", first),
                          ("drain_ms", drain), ("write_return_to_finish_ms", tail)):
            if vals:
                out[key] = round(statistics.median(vals), 2)
        out.update(worker_cpu(drain_tasks))
    return out


def worker_cpu(drain_tasks: list[list]) -> dict[str, float]:
    """The drain writer's Python worker CPU (ms, medians): inside ``write()``, and between one
    task's return and the next task's ``write()`` on the same worker (PySpark's per-task work in
    the worker: the result, the next task's set-up, unpickling the writer, the Arrow stream)."""
    inside, between = [], []
    by_pid: dict[int, list[list]] = {}
    for t in drain_tasks:
        inside.append((t[7] - t[6]) * 1000)
        by_pid.setdefault(t[5], []).append(t)
    for tasks in by_pid.values():
        tasks.sort(key=lambda t: t[2])
        for prev, nxt in zip(tasks, tasks[1:]):
            # consecutive tasks of one write stage (a gap of a second or more is another batch)
            if nxt[2] - prev[4] < 1.0:
                between.append((nxt[6] - prev[7]) * 1000)
    out = {}
    if inside:
        out["py_cpu_in_write_ms"] = round(statistics.median(inside), 3)
    if between:
        out["py_cpu_between_tasks_ms"] = round(statistics.median(between), 3)
    frozen = [t[8] for t in drain_tasks if len(t) > 8]
    if frozen:
        out["py_frozen_objects"] = statistics.median(frozen)
    return out


# ----------------------------------------------------------------------------- the suite

def run_tasks_suite(spark, k, ns, workdir: str, event_dir: str | None, say,
                    broker_pids: list[int] | None = None) -> dict[str, Any]:
    """Every P of ``--tasks-partitions``: each system once per round, rounds rotated, medians."""
    from .bench_runs import _rotated

    spark.dataSource.register(DrainDataSource)
    meter = None
    if event_dir:
        meter = CpuMeter.for_session(spark, broker_pids or [])
    chosen = getattr(ns, "tasks_systems", None)
    unknown = sorted(set(chosen or []) - set(SYSTEMS))
    if unknown:
        raise SystemExit(f"--tasks-systems: unknown {', '.join(unknown)}; one or more of "
                         f"{' '.join(SYSTEMS)}")
    systems = [s for s in SYSTEMS if not (ns.skip_builtin and s == "builtin")
               and not (s == "txkafka_exactly_once_librdkafka"
                        and not getattr(ns, "librdkafka_producer", False) and not chosen)
               and (not chosen or s in chosen)]
    batch_rows, batches = ns.tasks_batch_rows, ns.tasks_batches
    rows = batch_rows * (batches + 1)  # the first batch of each query is not timed
    say(f"tasks suite: filling its input, {rows} records of 100 B over 4 partitions "
        f"({batches} timed batches of {batch_rows} after a first one)")
    src = k.topic("bench-tasks-in", 4)
    k.fill(src, rows, 100)
    first = ns.tasks_partitions[0]
    for system in systems:  # Python workers, classes and clients warmed once, untimed
        say(f"  warming up {system} at {first} tasks")
        tasks_run(spark, system, k, src, rows, batch_rows, first, workdir)
    result: dict[str, Any] = {"batch_rows": batch_rows, "batches_per_run": batches,
                              "repeats": ns.repeats, "systems": systems, "points": []}
    all_runs: dict[tuple[int, str], list[dict]] = {}
    for p in ns.tasks_partitions:
        runs: dict[str, list[dict]] = {s: [] for s in systems}
        for i in range(ns.repeats):
            for _, system in _rotated([("tasks", s) for s in systems], i):
                r = tasks_run(spark, system, k, src, rows, batch_rows, p, workdir, meter)
                runs[system].append(r)
                say(f"  tasks {p} tasks, round {i + 1}/{ns.repeats}, {system}: addBatch "
                    f"{', '.join(f'{x / 1000:.2f}' for x in r['add_batch_ms'])} s")
        point = {"tasks": p, "systems": {s: summarize(v) for s, v in runs.items()}}
        result["points"].append(point)
        for s, v in runs.items():
            all_runs[(p, s)] = v
        say(f"  tasks {p}: " + ", ".join(f"{s} {v['batch_s']:.2f} s"
                                         for s, v in point["systems"].items()))
    if event_dir:
        ids = {r["query_id"] for v in all_runs.values() for r in v}
        per_query = write_stage_tasks(eventlog_files(event_dir), ids)
        result["trace"] = {}
        for (p, s), v in all_runs.items():
            per_run = [(r, [t for t in per_query.get(r["query_id"], [])
                            if t["batch_id"] in r["batch_ids"]]) for r in v]
            drain = [t for r in v for t in r["drain_tasks"]] if s == "drain" else None
            breakdown = task_breakdown([t for _, records in per_run for t in records], drain)
            breakdown.update(cpu_per_batch(v))
            outside = driver_outside_job(per_run)
            if outside is not None:
                breakdown["add_batch_outside_job_ms"] = outside
            result["trace"].setdefault(str(p), {})[s] = breakdown
        result["cpu_per_task_ms"] = cpu_per_task(result["trace"])
    return result


def driver_outside_job(runs: list[tuple[dict, list[dict]]]) -> float | None:
    """Median over timed batches of addBatch minus the batch's Spark job: the driver's part of
    a batch write outside its tasks (planning the write, a Python sink's ``streamWriter()`` and
    ``commit()`` processes). ``runs``: each run with its write-stage task records."""
    vals = []
    for run, records in runs:
        walls = {t["batch_id"]: t["job_wall_ms"] for t in records}
        for bid, add in run["add_batch_by_id"].items():
            if walls.get(bid) is not None:
                vals.append(add - walls[bid])
    return round(statistics.median(vals), 1) if vals else None


def cpu_per_batch(runs: list[dict]) -> dict[str, float]:
    """Median CPU seconds per batch (a run's CPU over its batches, the first one included),
    by process group."""
    per = [{g: c / r["batches"] for g, c in r["cpu_s"].items()} for r in runs
           if r.get("cpu_s") and r.get("batches")]
    if not per:
        return {}
    return {f"cpu_s_per_batch_{g}": round(statistics.median(x[g] for x in per), 4) for g in per[0]}


def cpu_per_task(trace: dict[str, dict[str, dict]]) -> dict[str, dict[str, float]]:
    """What one more write task costs in CPU (ms), by process group: the slope of CPU per batch
    between the smallest and the largest P. Query start and stop cancel out."""
    ps = sorted(int(p) for p in trace)
    if len(ps) < 2:
        return {}
    lo, hi = trace[str(ps[0])], trace[str(ps[-1])]
    out: dict[str, dict[str, float]] = {}
    for system in hi:
        keys = [k for k in hi[system] if k.startswith("cpu_s_per_batch_")]
        if system not in lo or not keys:
            continue
        out[system] = {k.removeprefix("cpu_s_per_batch_"):
                       round((hi[system][k] - lo[system].get(k, 0)) * 1000 / (ps[-1] - ps[0]), 3)
                       for k in keys}
        out[system]["total"] = round(sum(out[system].values()), 3)
    return out


# ----------------------------------------------------------------------------- report and chart

_TRACE_COLUMNS = [("duration_ms", "task"), ("scheduler_delay_ms", "sched. delay"),
                  ("deserialize_ms", "deser."), ("run_ms", "run"), ("cpu_ms", "CPU"),
                  ("py_boot_ms", "py boot"), ("py_init_ms", "py init"),
                  ("py_processing_ms", "py processing"), ("result_serialize_ms", "result ser."),
                  ("write_stage_wall_ms", "write stage wall"), ("job_wall_ms", "job wall"),
                  ("add_batch_outside_job_ms", "addBatch outside the job")]


_DRAIN_COLUMNS = [("launch_to_write_ms", "task launch to write()"),
                  ("write_to_first_batch_ms", "write() to its first Arrow batch"),
                  ("drain_ms", "draining"), ("write_return_to_finish_ms", "write() return to task end"),
                  ("py_cpu_in_write_ms", "worker CPU in write()"),
                  ("py_cpu_between_tasks_ms", "worker CPU between two tasks' write()")]


def report_lines(tasks: dict[str, Any]) -> list[str]:
    systems = tasks["systems"]
    lines = ["", f"Per-batch addBatch time, median (s); {tasks['batch_rows']:,}-row batches, "
             f"{tasks['batches_per_run']} per run, {tasks['repeats']} runs per system and P:", "",
             "| P tasks | " + " | ".join(LABELS[s] for s in systems)
             + " | EOS / drain | EOS / built-in |",
             "|---" * (len(systems) + 3) + "|"]
    for point in tasks["points"]:
        s = point["systems"]
        eos = s.get("txkafka_exactly_once", {}).get("batch_s")
        cells = [f"{s[x]['batch_s']:.2f}" for x in systems]
        r_drain = f"{eos / s['drain']['batch_s']:.2f}" if eos and "drain" in s else ""
        r_built = f"{eos / s['builtin']['batch_s']:.2f}" if eos and "builtin" in s else ""
        lines.append(f"| {point['tasks']} | " + " | ".join(cells) + f" | {r_drain} | {r_built} |")
    commits = [(point["tasks"], LABELS[x], v) for point in tasks["points"]
               for x, v in point["systems"].items() if "commit_end_txn_ms" in v]
    if commits:
        lines += ["", "The driver's commit of an exactly_once batch, medians (ms; from the sink's "
                  "commit log):", "", "| P tasks | system | DescribeTransactions + decision | "
                  "EndTxn, pipelined per coordinator |", "|---|---|---|---|"]
        lines += [f"| {p} | {label} | {v.get('commit_validate_and_decide_ms', float('nan')):.0f} | "
                  f"{v['commit_end_txn_ms']:.0f} |" for p, label, v in commits]
    for p, per_system in (tasks.get("trace") or {}).items():
        lines += ["", f"Write-stage tasks at {p} tasks, medians (ms):", "",
                  "| system | " + " | ".join(h for _, h in _TRACE_COLUMNS) + " |",
                  "|---" * (len(_TRACE_COLUMNS) + 1) + "|"]
        for s, b in per_system.items():
            lines.append(f"| {LABELS[s]} | " + " | ".join(
                "" if b.get(key) is None else f"{b[key]:g}" for key, _ in _TRACE_COLUMNS) + " |")
        drain = per_system.get("drain") or {}
        inside = [f"{h} {drain[key]:g}" for key, h in _DRAIN_COLUMNS if key in drain]
        if inside:
            lines += ["", "Drain writer, inside its Python worker (ms): " + ", ".join(inside)]
    per_task = tasks.get("cpu_per_task_ms") or {}
    if per_task:
        groups = list(next(iter(per_task.values())))
        lines += ["", "CPU per additional write task (ms; slope between the smallest and largest P):",
                  "", "| system | " + " | ".join(groups) + " |", "|---" * (len(groups) + 1) + "|"]
        for s, v in per_task.items():
            lines.append(f"| {LABELS[s]} | " + " | ".join(f"{v.get(g, 0):g}" for g in groups) + " |")
    return lines


def chart(tasks: dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    xs = [p["tasks"] for p in tasks["points"]]
    for s in tasks["systems"]:
        left.plot(xs, [p["systems"][s]["batch_s"] for p in tasks["points"]], marker="o",
                  label=LABELS[s])
    left.set_xscale("log", base=2)
    left.set_xticks(xs, [str(x) for x in xs])
    left.set_xlabel("write tasks per batch (P)")
    left.set_ylabel(f"s per {tasks['batch_rows']:,}-row batch (addBatch, median)")
    left.set_title("cost of a micro-batch against its write tasks")
    left.legend(fontsize=8)
    for eos, color in (("txkafka_exactly_once", "#8a4fbf"), ("txkafka_exactly_once_librdkafka",
                                                             "#8c564b"),
                       ("txkafka_exactly_once_wire", "#8c564b")):
        for base, style in (("drain", "-"), ("builtin", "--")):
            if base not in tasks["systems"] or eos not in tasks["systems"]:
                continue
            right.plot(xs, [p["systems"][eos]["batch_s"] / p["systems"][base]["batch_s"]
                            for p in tasks["points"]], marker="o", ls=style, color=color,
                       label=f"{LABELS[eos].removeprefix('txkafka ')} / {LABELS[base]}")
    right.axhline(1.1, color="grey", lw=0.8, ls=":")  # the target against the drain-only writer
    right.set_xscale("log", base=2)
    right.set_xticks(xs, [str(x) for x in xs])
    right.set_xlabel("write tasks per batch (P)")
    right.set_ylabel("ratio of per-batch times")
    right.set_title("txkafka exactly_once against its references")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "tasks.png"), dpi=110)
    plt.close(fig)
