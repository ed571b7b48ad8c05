"""`python -m txkafka.devtools bench` end to end on the session broker, sized to seconds: the JSON result and the PNG
chart are written and the core ratios are computed from interleaved runs. (The numbers in
docs/benchmarks.md come from the full-size run; nothing here times anything.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from txkafka.devtools.bench import NO_SPARK_RUNS_PER_ROUND
from txkafka.devtools.bench_tasks import GROUPS

pytestmark = [pytest.mark.kafka]


def test_bench_writes_json_and_charts(kafka, tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "txkafka.devtools", "bench", "-b", kafka.bootstrap, "--rows", "20000",
         "--repeats", "2", "--suites", "ceiling", "core", "--skip-builtin", "--pyspark-home",
         "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "throughput round 2/2" in proc.stdout  # progress is shown
    result = json.loads((out / "benchmark.json").read_text())
    per_system = 2 * NO_SPARK_RUNS_PER_ROUND  # two rounds; runs without Spark repeat in each round
    assert len(result["core"]["write"]["runs"]) == per_system
    assert len(result["ceiling"]["runs"]["produce"]) == per_system
    assert result["core"]["write"]["rows_s"] > 0 and result["core"]["read"]["rows_s"] > 0
    assert set(result["ratios"]) == {"txkafka core read (no Spark) / plain consumer",
                                     "txkafka core exactly-once write (no Spark) / plain producer"}
    assert (out / "throughput.png").stat().st_size > 1000
    assert "| core: write |" in proc.stdout
    home = result["machine"]["spark_home"]  # --pyspark-home: built, and recorded with the result
    assert (Path(home) / ".txkafka-pyspark-home").is_file(), home
    assert result["machine"]["spark_python_imports_pyspark_from"] == str(
        Path(home) / "python" / "lib" / "pyspark.zip" / "pyspark" / "__init__.pyc")
    assert "version unknown" in result["machine"]["kafka"]  # -b: not the embedded one's
    assert "warming up the plain producer" in proc.stdout
    assert "warming up txkafka's writer without Spark" in proc.stdout
    assert not _bench_topics(kafka.bootstrap)  # -b: its topics are deleted at the end


def _bench_topics(bootstrap: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    names = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    return [n for n in names if n.startswith(("bench-", "lat-"))]


@pytest.mark.spark
@pytest.mark.slow
def test_bench_spark_suites_check_their_counts(kafka, tmp_path):
    """The Spark suites at a few thousand rows: each run's rows read, output records (exactly,
    by a read_committed count) and latency window are checked, or the command fails."""
    out = tmp_path / "bench"
    rate, seconds = 500, 4
    proc = subprocess.run(
        [sys.executable, "-m", "txkafka.devtools", "bench", "-b", kafka.bootstrap, "--rows", "4000",
         "--repeats", "1", "--suites", "read", "write", "sink", "latency", "--skip-builtin",
         "--librdkafka-producer", "--latency-seconds", str(seconds), "--latency-rate", str(rate),
         "--no-warmup", "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "benchmark.json").read_text())
    assert result["read"]["txkafka"]["rows_s"] > 0
    # Query start, txkafka's beside the minimal Python source's (Spark's cost for any of them).
    start = result["read_start"]
    assert len(start["txkafka"]["runs"]) == len(start["python_floor"]["runs"]) == 1, start
    assert 0 < start["python_floor"]["median_s"] < 60 and 0 < start["txkafka"]["median_s"] < 60
    assert "| python_floor |" in proc.stdout
    assert set(n for n, v in result["write"].items() if isinstance(v, dict)) == {
        "txkafka_exactly_once", "txkafka_at_least_once", "noop", "txkafka_exactly_once_librdkafka"}
    assert result["sink"]["txkafka_exactly_once"]["rows_s"] > 0
    assert result["sink"]["txkafka_exactly_once_librdkafka"]["rows_s"] > 0  # the variant
    assert result["sink"]["drain"]["rows_s"] > 0  # the floor: a Python writer that only drains
    cpu = result["sink"]["txkafka_exactly_once"]["cpu_us_per_row"]  # by process group
    # Every group is measured; which group a few milliseconds of CPU land in is the kernel's tick
    # sampling (4,000 rows), so only the whole is asserted.
    assert set(GROUPS) <= set(cpu) and cpu["jvm"] + cpu["python_workers"] > 0, cpu
    assert "CPU us per row" in proc.stdout
    assert result["params"]["librdkafka_producer"] is True and result["params"]["warmup"] is False
    assert result["params"]["producers"]["txkafka_exactly_once"] == "default (txkafka)"
    assert "warming up" not in proc.stdout
    for trig in ("1s", "5s"):
        assert result["latency"][trig]["samples"] >= 0.95 * rate * seconds
    assert "window records received" in proc.stdout  # the latency runs show progress
    assert not _bench_topics(kafka.bootstrap)


@pytest.mark.spark
@pytest.mark.slow
def test_bench_tasks_suite_small(kafka, tmp_path):
    """The tasks suite at two small P and tiny batches, traced: every system's batches are timed
    and counted (the drain writer's ledger, read_committed counts of the Kafka outputs), the
    write stages are found in Spark's event log and the report, JSON and chart are written."""
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "txkafka.devtools", "bench", "-b", kafka.bootstrap, "--suites",
         "tasks", "--tasks-partitions", "2", "6", "--tasks-batches", "1", "--tasks-batch-rows",
         "2000", "--repeats", "1", "--skip-builtin", "--trace", "--pyspark-home", "--librdkafka-producer",
         "--out", str(out)],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tasks = json.loads((out / "benchmark.json").read_text())["tasks"]
    assert [p["tasks"] for p in tasks["points"]] == [2, 6]
    systems = {"drain", "mapinarrow_noop", "txkafka_at_least_once", "txkafka_exactly_once",
               "txkafka_exactly_once_librdkafka"}
    for point in tasks["points"]:
        assert set(point["systems"]) == systems
        for s in point["systems"].values():
            assert s["batch_s"] > 0 and len(s["runs_ms"]) == 1
        for s in ("txkafka_exactly_once", "txkafka_exactly_once_librdkafka"):  # driver's commit
            assert point["systems"][s]["commit_end_txn_ms"] > 0
            assert point["systems"][s]["commit_validate_and_decide_ms"] > 0
    for p, n in (("2", 2), ("6", 6)):
        for s in systems:  # each timed batch's write stage, P tasks of it, found in the log
            assert tasks["trace"][p][s]["tasks"] == n, (p, s, tasks["trace"][p][s])
        drain = tasks["trace"][p]["drain"]
        assert drain["drain_ms"] >= 0 and drain["py_cpu_in_write_ms"] >= 0
    assert tasks["trace"]["6"]["drain"]["py_cpu_between_tasks_ms"] >= 0
    assert set(tasks["cpu_per_task_ms"]) == systems
    assert "tasks: exactly_once / drain-only writer at 6 tasks" in proc.stdout
    assert "tasks: exactly_once producer=librdkafka / drain-only writer at 6 tasks" in proc.stdout
    assert (out / "tasks.png").stat().st_size > 1000
    assert not _bench_topics(kafka.bootstrap)


def test_bench_produce_checks_both_paths(kafka, tmp_path):
    """`python -m txkafka.devtools.bench_produce` small: both producers' transactions are committed and
    counted (offsets and a full read-back), the task-start figures are taken, JSON and chart are
    written and its topics are deleted."""
    out = tmp_path / "produce"
    proc = subprocess.run(
        [sys.executable, "-m", "txkafka.devtools.bench_produce", "-b", kafka.bootstrap,
         "--rows", "3000", "--sizes", "100", "--partitions", "1", "3", "--repeats", "1",
         "--startup-runs", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "produce.json").read_text())
    assert {(r["partitions"], r["value_bytes"]) for r in result["throughput"]} == {(1, 100), (3, 100)}
    assert result["startup"]["wire_kept"]["median_ms"] > 0
    assert (out / "produce.png").stat().st_size > 1000
    assert not _bench_topics(kafka.bootstrap)


def test_bench_endurance_samples_resources_and_checks_every_record(kafka, tmp_path):
    """`python -m txkafka.devtools bench-endurance` for half a minute on the session broker: every input record
    arrives once in the read_committed output, the resources are sampled (the sink's commit log
    and transactional ids included) and the JSON, chart and report are written."""
    out = tmp_path / "endurance"
    proc = subprocess.run(
        [sys.executable, "-m", "txkafka.devtools", "bench-endurance", "-b", kafka.bootstrap,
         "--minutes", "0.5", "--rate", "200", "--trigger-s", "1", "--partitions", "2",
         "--sample-s", "5", "--pyspark-home", "--producer", "txkafka", "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads((out / "endurance.json").read_text())
    rec = r["records"]
    assert rec["sent"] >= 200 and rec["received"] == rec["sent"], rec
    assert rec["duplicates"] == 0 and rec["missing"] == 0 and r["ok"]
    assert len(r["samples"]) >= 4
    last = r["samples"][-1]
    assert last["jvm_rss_mb"] > 0 and last["py_processes"] >= 1 and last["commit_log_files"] > 0
    assert max(s["txn_ids"] for s in r["samples"]) > 0  # the sink's ids, seen on the broker
    assert r["visibility"] and "jvm_rss_mb" in r["slopes"]
    assert r["startup"]["seconds"] > 0 and r["startup"]["records"] > 0  # the hour starts caught up
    assert any(s.get("jvm_heap_floor_mb", 0) > 0 for s in r["samples"])
    assert (out / "endurance.png").stat().st_size > 0
    assert "0 duplicates, 0 missing" in proc.stdout
    assert r["setup"]["producer"] == "txkafka" and "producer txkafka" in proc.stdout
