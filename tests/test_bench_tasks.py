"""The tasks suite's arithmetic and trace parsing: medians, the issue's ratios, the event-log
breakdown, CPU by process group, and the report and chart (no Spark, no broker)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from txkafka.devtools.bench import ratios, report_markdown
from txkafka.devtools.bench_tasks import (
    CpuMeter,
    chart,
    cpu_delta,
    cpu_per_batch,
    cpu_per_task,
    summarize,
    task_breakdown,
    tasks_ratios,
    worker_cpu,
    write_stage_tasks,
)


def _point(p: int, builtin: float, drain: float, eos: float) -> dict:
    def sys_(s: float) -> dict:
        return {"batch_s": s, "rows_s": 40_000 / s, "runs_ms": [[s * 1000]], "first_batch_ms": [1]}
    return {"tasks": p, "systems": {"builtin": sys_(builtin), "drain": sys_(drain),
                                    "txkafka_exactly_once": sys_(eos)}}


def _tasks() -> dict:
    return {"batch_rows": 40_000, "batches_per_run": 3, "repeats": 3,
            "systems": ["builtin", "drain", "txkafka_exactly_once"],
            "points": [_point(2, 0.6, 0.55, 0.5), _point(200, 1.5, 6.0, 7.2)]}


def test_summarize_takes_the_median_of_every_timed_batch():
    runs = [{"add_batch_ms": [1000, 3000], "batch_rows": [40_000, 40_000], "first_batch_ms": 9000},
            {"add_batch_ms": [2000], "batch_rows": [40_000], "first_batch_ms": 8000}]
    s = summarize(runs)
    assert s["batch_s"] == 2.0 and s["rows_s"] == 20_000
    assert s["first_batch_ms"] == [9000, 8000]
    with pytest.raises(RuntimeError, match="no full batch"):
        summarize([{"add_batch_ms": [], "batch_rows": [], "first_batch_ms": 1}])


def test_summarize_keeps_the_drivers_commit_medians():
    runs = [{"add_batch_ms": [1000], "batch_rows": [40_000], "first_batch_ms": 1,
             "commit_ms": [{"batch": 1, "transactions": 200, "validate_and_decide_ms": 40.0,
                            "end_txn_ms": 90.0},
                           {"batch": 2, "transactions": 200, "validate_and_decide_ms": 60.0,
                            "end_txn_ms": 110.0}]},
            {"add_batch_ms": [1200], "batch_rows": [40_000], "first_batch_ms": 1,
             "commit_ms": [{"batch": 1, "transactions": 200, "validate_and_decide_ms": 50.0,
                            "end_txn_ms": 100.0}]}]
    s = summarize(runs)
    assert s["commit_validate_and_decide_ms"] == 50.0 and s["commit_end_txn_ms"] == 100.0
    assert "commit_end_txn_ms" not in summarize([{**runs[0], "commit_ms": []}])
    tasks = {**_tasks(), "points": [{"tasks": 200, "systems": {"txkafka_exactly_once": s}}],
             "systems": ["txkafka_exactly_once"]}
    from txkafka.devtools.bench_tasks import report_lines

    assert "| 200 | txkafka exactly_once | 50 | 100 |" in report_lines(tasks)


def test_ratios_against_the_issue_targets():
    got = {name: (round(v, 3), t) for name, v, t in tasks_ratios(_tasks())}
    assert got["tasks: exactly_once / drain-only writer at 2 tasks"] == (0.909, 1.1)
    assert got["tasks: exactly_once / drain-only writer at 200 tasks"] == (1.2, 1.1)
    assert got["tasks: exactly_once / built-in sink at 200 tasks"] == (4.8, 3.0)
    assert got["tasks: exactly_once / built-in sink at 2 tasks"] == (0.833, 1.0)
    variant = _tasks()
    variant["points"][1]["systems"]["txkafka_exactly_once_librdkafka"] = {"batch_s": 3.0}
    got = {name: round(v, 3) for name, v, _ in tasks_ratios(variant)}
    assert got["tasks: exactly_once producer=librdkafka / built-in sink at 200 tasks"] == 2.0
    assert "tasks: exactly_once producer=librdkafka / built-in sink at 2 tasks" not in got
    r = ratios({"tasks": _tasks()})
    assert r["tasks: exactly_once / drain-only writer at 200 tasks"]["met"] is False
    assert r["tasks: exactly_once / built-in sink at 2 tasks"] == {
        "value": 0.833, "target": "<= 1.0", "met": True}


def _event(kind: str, **kw) -> str:
    return json.dumps({"Event": kind, **kw})


def _task_end(stage: int, tid: int, launch: int, finish: int, run: int, init: str,
              kind: str = "ResultTask") -> str:
    return _event("SparkListenerTaskEnd", **{
        "Stage ID": stage, "Task End Reason": {"Reason": "Success"}, "Task Type": kind,
        "Task Info": {"Task ID": tid, "Launch Time": launch, "Finish Time": finish,
                      "Getting Result Time": 0,
                      "Accumulables": [{"Name": "time to initialize Python workers",
                                        "Update": init}]},
        "Task Metrics": {"Executor Deserialize Time": 2, "Executor Run Time": run,
                         "Executor CPU Time": 3_000_000, "Result Serialization Time": 1,
                         "JVM GC Time": 0, "Shuffle Read Metrics": {"Fetch Wait Time": 0}}})


def test_event_log_gives_the_write_stage_of_each_batch(tmp_path):
    log = tmp_path / "app"
    lines = [
        _event("SparkListenerJobStart", **{"Job ID": 7, "Stage IDs": [10, 11], "Submission Time": 100,
                                           "Properties": {"sql.streaming.queryId": "q1",
                                                          "streaming.sql.batchId": "1"}}),
        _event("SparkListenerJobStart", **{"Job ID": 8, "Stage IDs": [12],  # another query
                                           "Submission Time": 100,
                                           "Properties": {"sql.streaming.queryId": "other",
                                                          "streaming.sql.batchId": "1"}}),
        # AQE runs a shuffle's map stage as a job of its own: its last stage is not a write stage
        _event("SparkListenerJobStart", **{"Job ID": 6, "Stage IDs": [9], "Submission Time": 90,
                                           "Properties": {"sql.streaming.queryId": "q1",
                                                          "streaming.sql.batchId": "1"}}),
        _task_end(9, 0, 90, 95, 4, "5", kind="ShuffleMapTask"),
        _task_end(10, 1, 100, 150, 40, "5", kind="ShuffleMapTask"),  # not the write stage
        _task_end(11, 2, 200, 260, 50, "3"),
        _task_end(11, 3, 210, 240, 20, "4"),
        _task_end(12, 4, 210, 240, 20, "4"),
        _event("SparkListenerStageCompleted", **{"Stage Info": {"Stage ID": 10, "Submission Time": 100,
                                                                "Completion Time": 160}}),
        _event("SparkListenerStageCompleted", **{"Stage Info": {"Stage ID": 11, "Submission Time": 190,
                                                                "Completion Time": 270}}),
        _event("SparkListenerJobEnd", **{"Job ID": 7, "Completion Time": 280}),
        '{"Event": "SparkListenerTaskEnd", "trunc',  # a log still being written
    ]
    log.write_text("\n".join(lines) + "\n")
    got = write_stage_tasks([str(log)], {"q1"})
    assert set(got) == {"q1"}
    assert [r["task_id"] for r in got["q1"]] == [2, 3]
    first = got["q1"][0]
    assert first["batch_id"] == 1 and first["duration_ms"] == 60 and first["py_init_ms"] == 3.0
    assert first["scheduler_delay_ms"] == 60 - 50 - 2 - 1
    assert first["write_stage_wall_ms"] == 80 and first["job_wall_ms"] == 180
    assert first["other_stages_wall_ms"] == 60
    b = task_breakdown(got["q1"])
    assert b["tasks"] == 2 and b["duration_ms"] == 45 and b["write_stage_wall_ms"] == 80
    # The drain writer's own stamps, joined on the task id (seconds -> ms against launch/finish).
    drain = [[2, 10, 0.205, 0.206, 0.25, 99, 1.0, 1.001], [3, 10, 0.215, None, 0.22, 99, 1.002,
                                                          1.0025]]
    b = task_breakdown(got["q1"], drain)
    assert b["launch_to_write_ms"] == 5.0 and b["write_return_to_finish_ms"] == 15.0


def test_worker_cpu_between_tasks_on_one_worker():
    tasks = [[1, 0, 10.0, 10.0, 10.01, 7, 1.000, 1.001],
             [2, 0, 10.03, 10.03, 10.04, 7, 1.021, 1.022],   # 20 ms of CPU between the two
             [3, 0, 15.0, 15.0, 15.01, 7, 2.000, 2.001],     # another batch: not a gap
             [4, 0, 10.02, 10.02, 10.03, 8, 5.000, 5.002]]
    got = worker_cpu(tasks)
    assert got["py_cpu_between_tasks_ms"] == pytest.approx(20.0)
    assert got["py_cpu_in_write_ms"] == pytest.approx(1.0)


def test_cpu_per_task_is_the_slope_between_the_smallest_and_largest_p():
    runs_2 = [{"batches": 2, "cpu_s": {"jvm": 2.0, "python_workers": 1.0}}]
    runs_202 = [{"batches": 2, "cpu_s": {"jvm": 4.0, "python_workers": 6.0}}]
    trace = {"2": {"drain": cpu_per_batch(runs_2)}, "202": {"drain": cpu_per_batch(runs_202)}}
    got = cpu_per_task(trace)["drain"]
    assert got == {"jvm": 5.0, "python_workers": 12.5, "total": 17.5}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_cpu_meter_counts_a_spark_python_worker_by_its_module():
    worker = subprocess.Popen([sys.executable, "-c",
                               "import time\nt=time.process_time()\n"
                               "while time.process_time()-t<0.3: pass\ntime.sleep(30)",
                               "pyspark.worker"])
    try:
        meter = CpuMeter(jvm_pid=__import__("os").getpid(), broker_pids=[])
        deadline = time.monotonic() + 30
        while True:
            # Only this test's worker is asserted on: other tests' Spark workers run beside it.
            mine = {k: v for k, v in meter.snapshot().items() if k[0] == worker.pid}
            if (mine and next(iter(mine.values()))[1] >= 0.25) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert [kind for kind, _ in mine.values()] == ["python_workers"], mine
        # a process born after the first snapshot counts whole
        assert cpu_delta({(1, 1): ("jvm", 0.0)}, mine)["python_workers"] >= 0.25
        # ...and one gone by the second snapshot is left out, never subtracted
        assert cpu_delta({(1, 1): ("python_workers", 5.0)},
                         {(2, 1): ("python_workers", 1.0)})["python_workers"] == 1.0
    finally:
        worker.kill()
        worker.wait()


def test_report_and_chart(tmp_path):
    t = _tasks()
    t["trace"] = {"200": {"drain": {"tasks": 400, "duration_ms": 30.0, "py_init_ms": 1.0,
                                    "py_cpu_between_tasks_ms": 21.5}}}
    t["cpu_per_task_ms"] = {"drain": {"jvm": 5.0, "python_workers": 12.5, "total": 17.5}}
    text = report_markdown({"tasks": t, "ratios": ratios({"tasks": t})})
    assert "| 200 | 1.50 | 6.00 | 7.20 | 1.20 | 4.80 |" in text
    assert "worker CPU between two tasks' write() 21.5" in text
    assert "| Python writer, drain only | 5 | 12.5 | 17.5 |" in text
    chart(t, str(tmp_path))
    assert (tmp_path / "tasks.png").stat().st_size > 10_000


def test_driver_time_outside_the_job():
    from txkafka.devtools.bench_tasks import driver_outside_job

    run = {"add_batch_by_id": {1: 500, 2: 700}}
    records = [{"batch_id": 1, "job_wall_ms": 400}, {"batch_id": 2, "job_wall_ms": 500}]
    assert driver_outside_job([(run, records)]) == 150.0
    assert driver_outside_job([(run, [])]) is None
