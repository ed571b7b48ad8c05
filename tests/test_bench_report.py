"""The benchmark's arithmetic: ratios against targets, interleaving order, the markdown report;
the command's errors before a run and for a result file it cannot read."""

import re
import sys

import pytest

from txkafka.devtools.bench_runs import _rotated
from txkafka.devtools.bench import (produce_requests, produce_summary, pyspark_bytecode_setting,
                                    ratios, report_markdown)


def _result():
    return {
        "ceiling": {"produce_rows_s": 400_000.0, "consume_rows_s": 200_000.0,
                    "runs": {"produce": [400_000.0], "consume": [200_000.0]}},
        "core": {"write": {"rows_s": 300_000.0, "runs": [300_000.0]},
                 "read": {"rows_s": 100_000.0, "runs": [100_000.0]}},
        "read": {"txkafka": {"rows_s": 150_000.0, "runs": [150_000.0]},
                 "kafka": {"rows_s": 100_000.0, "runs": [100_000.0]}},
        "write": {"txkafka_exactly_once": {"rows_s": 45_000.0, "runs": [45_000.0]},
                  "txkafka_at_least_once": {"rows_s": 50_000.0, "runs": [50_000.0]},
                  "builtin": {"rows_s": 60_000.0, "runs": [60_000.0]},
                  "trigger": "1 second", "rows_per_batch": 1000},
        "sink": {"txkafka_exactly_once": {"rows_s": 320_000.0, "runs": [320_000.0]},
                 "builtin": {"rows_s": 300_000.0, "runs": [300_000.0]},
                 "mode": "batch df.write of a cached DataFrame"},
        "latency": {"1s": {"p50": 1.1, "p95": 1.6, "p99": 2.4, "samples": 100}},
    }


def test_ratios_compare_against_the_issue_targets():
    r = ratios(_result())
    assert r["read txkafka / built-in"] == {"value": 1.5, "target": ">= 2.0", "met": False}
    assert r["write txkafka exactly_once / built-in"]["value"] == 0.75
    assert r["write txkafka exactly_once / built-in"]["met"] is False
    assert r["txkafka exactly_once / at_least_once (1 s trigger)"]["value"] == 0.9
    assert r["txkafka exactly_once / at_least_once (1 s trigger)"]["met"] is True
    assert r["txkafka core read (no Spark) / plain consumer"]["value"] == 0.5
    assert r["txkafka core exactly-once write (no Spark) / plain producer"]["value"] == 0.75
    sink = r["txkafka exactly-once write in Spark (batch write, cached input) / plain producer"]
    assert sink == {"value": 0.8, "target": ">= 0.7", "met": True}
    lat = r["exactly-once visibility p99 at 1s trigger (s)"]
    assert lat == {"value": 2.4, "target": "<= 1.3", "met": False}
    vs_builtin = r["sink (batch write, cached input) exactly_once / built-in"]
    assert vs_builtin == {"value": 1.067, "target": ">= 1.2", "met": False}


def test_the_librdkafka_producer_gets_its_own_ratios():
    result = _result()
    result["sink"]["txkafka_exactly_once_librdkafka"] = {"rows_s": 450_000.0, "runs": [450_000.0]}
    result["write"]["txkafka_exactly_once_librdkafka"] = {"rows_s": 54_000.0, "runs": [54_000.0]}
    r = ratios(result)
    assert r["sink (batch write, cached input) exactly_once producer=librdkafka / built-in"] == {
        "value": 1.5, "target": ">= 1.2", "met": True}
    assert r["write txkafka exactly_once producer=librdkafka / built-in"]["value"] == 0.9


def test_the_report_names_each_systems_producer():
    from txkafka.devtools.bench_runs import PRODUCERS

    new = {**_result(), "params": {"producers": dict(PRODUCERS)}}
    assert "Producers: txkafka_exactly_once default (txkafka)" in report_markdown(new)
    old = _result()  # a file from before the systems named the default producer
    assert "Producers: txkafka_exactly_once librdkafka" in report_markdown(old)


def test_charts_draw_every_suite(tmp_path):
    from txkafka.devtools.bench import charts

    charts({**_result(), "ratios": ratios(_result())}, str(tmp_path))
    assert (tmp_path / "throughput.png").stat().st_size > 10_000
    assert (tmp_path / "latency.png").exists()


def test_charts_have_one_panel_per_suite_the_run_has(tmp_path):
    import matplotlib.image

    from txkafka.devtools.bench import charts

    full, read_only = tmp_path / "full", tmp_path / "read"
    full.mkdir()
    read_only.mkdir()
    charts(_result(), str(full))
    r = _result()
    charts({"ceiling": r["ceiling"], "read": r["read"]}, str(read_only))
    width = {d: matplotlib.image.imread(str(d / "throughput.png")).shape[1]
             for d in (full, read_only)}
    assert width[full] > 2.5 * width[read_only]  # three panels against one, no empty frames
    assert not (read_only / "latency.png").exists()
    core_only = tmp_path / "core"
    core_only.mkdir()
    charts({"ceiling": r["ceiling"], "core": r["core"]}, str(core_only))
    # the core's read and write bars, each against its plain client
    assert matplotlib.image.imread(str(core_only / "throughput.png")).shape[1] > 1.5 * width[read_only]


def test_rounds_rotate_each_suite_but_keep_the_ceiling_pair_in_order():
    systems = [("ceiling", "produce"), ("ceiling", "consume"), ("read", "a"), ("read", "b"),
               ("write", "x"), ("write", "y"), ("write", "z")]
    firsts = set()
    for i in range(3):
        order = _rotated(systems, i)
        assert sorted(order) == sorted(systems)
        assert order[:2] == [("ceiling", "produce"), ("ceiling", "consume")]
        firsts.add(next(n for s, n in order if s == "write"))
    assert firsts == {"x", "y", "z"}


def test_report_lists_every_comparison_and_run():
    text = report_markdown({**_result(), "ratios": ratios(_result())})
    assert "| read txkafka / built-in | 1.5 | >= 2.0 | no |" in text
    assert "| write: builtin | 60,000 |" in text
    assert "| core: write | 300,000 |" in text
    assert "| sink: txkafka_exactly_once | 320,000 | 320,000 |" in text
    assert "| 1s | 1.10 | 1.60 | 2.40 | 100 |" in text
    assert "CPU us per row" not in text  # no run measured it


def test_report_shows_the_sink_runs_cpu_per_row_by_process_group():
    r = _result()
    r["sink"]["txkafka_exactly_once"]["cpu_us_per_row"] = {
        "jvm": 0.42, "python_workers": 0.6, "python_exited": 0.0, "broker": 0.85}
    text = report_markdown(r)
    assert "| sink: CPU us per row (median of runs) | jvm | python_workers | broker |" in text
    assert "| txkafka_exactly_once | 0.42 | 0.60 | 0.85 |" in text


def test_the_sink_runs_produce_requests_are_counted_from_the_broker_s_request_log(tmp_path):
    """What Kafka's request logger writes at DEBUG (one line per completed request): Produce
    requests are counted from the offset the run started at, empty ones apart, with their
    record bytes; other APIs are left out."""
    head = '{"isForwarded":false,"requestHeader":{"requestApiKey":%d,"requestApiVersion":11,'
    produce = (head % 0 + '"correlationId":7,"clientId":"txkafka-writer","requestApiKeyName":'
               '"PRODUCE"},"request":{"transactionalId":"x","acks":-1,"timeoutMs":30000,'
               '"topicData":[{"name":"t","partitionData":[{"index":0,"recordsSizeInBytes":'
               '%d},{"index":1,"recordsSizeInBytes":%d}]}]},"response":{}}')
    empty = (head % 0 + '"correlationId":8},"request":{"transactionalId":"x","acks":-1,'
             '"timeoutMs":30000,"topicData":[]},"response":{}}')
    fetch = head % 1 + '"correlationId":9},"request":{"recordsSizeInBytes":5}}'
    log = tmp_path / "kafka-request.log"
    log.write_text("Completed request:" + produce % (1, 1) + "\n")
    start = log.stat().st_size
    with open(log, "a") as fh:
        for line in (produce % (1000, 24), empty, fetch, empty, produce % (100, 0)):
            fh.write("Completed request:" + line + "\n")
    counted = produce_requests(log, start)
    assert counted == {"requests": 4, "empty": 2, "bytes": 1124}
    r = _result()
    r["sink"]["txkafka_exactly_once"]["produce_requests"] = produce_summary([counted, counted])
    assert r["sink"]["txkafka_exactly_once"]["produce_requests"]["bytes_per_request"] == 281
    text = report_markdown(r)
    assert "| sink: Produce requests per run (the broker's count, median) | requests | empty | " \
           "bytes per request |" in text
    assert "| txkafka_exactly_once | 4 | 2 | 281 |" in text


def test_the_data_batch_read_ratio_is_reported_next_to_the_wall_time_one():
    r = _result()
    r["read"]["txkafka"].update({"batch_rows_s": 240_000.0, "batch_runs": [240_000.0]})
    r["read"]["kafka"].update({"batch_rows_s": 160_000.0, "batch_runs": [160_000.0]})
    got = ratios(r)
    name = "read txkafka / built-in, inside the data batches (query start and stop excluded)"
    assert got[name] == {"value": 1.5, "target": ">= 1.0", "met": True}
    assert got["read txkafka / built-in"]["value"] == 1.5  # the headline stays wall time
    inside = got["txkafka read in Spark, inside the data batches / plain consumer"]
    assert inside == {"value": 1.2, "target": ">= 0.7", "met": True}
    assert got["txkafka read in Spark / plain consumer"]["value"] == 0.75
    text = report_markdown({**r, "ratios": got})
    assert "| read: txkafka, inside the data batches | 240,000 | 240,000 |" in text


class _Query:
    recentProgress = [
        {"numInputRows": 0, "durationMs": {"triggerExecution": 500}},
        {"numInputRows": 600, "durationMs": {"triggerExecution": 2000}},
        {"numInputRows": 400, "durationMs": {"triggerExecution": 3000}},
    ]


def test_data_batch_rate_skips_batches_without_rows():
    from txkafka.devtools.bench import _data_batch_rate

    assert _data_batch_rate(_Query()) == 200.0


def test_runs_without_spark_repeat_within_each_round():
    from txkafka.devtools.bench import NO_SPARK_RUNS_PER_ROUND, _round_order

    systems = [("ceiling", "produce"), ("ceiling", "consume"), ("core", "write"), ("core", "read"),
               ("read", "a"), ("read", "b")]
    order = _round_order(systems, 1)
    k = NO_SPARK_RUNS_PER_ROUND
    assert order[:2 * k] == [("ceiling", "produce"), ("ceiling", "consume")] * k
    assert order[2 * k:4 * k] == [("core", "read"), ("core", "write")] * k  # rotated by 1
    assert order[4 * k:] == [("read", "b"), ("read", "a")]  # Spark suites once per round


def test_report_states_the_python_start_up_setting():
    m = {"pyspark_bytecode": "enabled", "spark_home": "(the installed pyspark)",
         "spark_python_imports_pyspark_from": "/v/site-packages/pyspark/__init__.py"}
    text = report_markdown({**_result(), "machine": m})
    assert text.splitlines()[0] == ("Python start-up: `txkafka pyspark-bytecode` enabled (Spark's Python "
                                    "processes imported pyspark from `/v/site-packages/pyspark/__init__.py`)")
    # results from before the field: read from where Spark's Python imported pyspark
    del m["pyspark_bytecode"]
    assert pyspark_bytecode_setting(m) == "enabled"
    m["spark_python_imports_pyspark_from"] = "/v/pyspark/python/lib/pyspark.zip/pyspark/__init__.py"
    assert pyspark_bytecode_setting(m) == "disabled"
    assert "pyspark-home" in pyspark_bytecode_setting({**m, "spark_home": "/c/spark-home"})


def test_spark_conf_pairs_parse_key_value_and_refuse_the_rest():
    import pytest

    from txkafka.devtools.bench import spark_conf_pairs

    assert spark_conf_pairs(["spark.python.unix.domain.socket.enabled=true", "a.b=c=d"]) == {
        "spark.python.unix.domain.socket.enabled": "true", "a.b": "c=d"}
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        spark_conf_pairs(["spark.sql.shuffle.partitions"])


@pytest.fixture
def no_broker(monkeypatch):
    """A benchmark that gets as far as starting a broker fails the test instead."""
    import txkafka.embedded_kafka as embedded

    def started(*args, **kwargs):
        raise AssertionError("the benchmark started a broker")

    monkeypatch.setattr(embedded, "EmbeddedKafka", started)


@pytest.mark.parametrize("command", ["bench", "bench-endurance"])
def test_a_benchmark_without_the_bench_extra_stops_before_it_runs(monkeypatch, tmp_path,
                                                                  no_broker, command):
    """Its charts need matplotlib: without it the command says how to install it, before any
    broker or suite starts, instead of failing at the end of the run."""
    from txkafka.devtools.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ModuleNotFoundError
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=r"^error: .*pip install 'txkafka\[bench\]'"):
        main([command, "--out", str(out)])
    assert not out.exists()


@pytest.mark.parametrize("command", ["bench", "bench-endurance"])
def test_report_of_a_missing_or_damaged_file_is_an_error_line(tmp_path, command):
    from txkafka.devtools.cli import main

    missing = tmp_path / "nonexistent.json"
    with pytest.raises(SystemExit, match=rf"^error: --report {re.escape(str(missing))}: cannot "
                                         r"read it \(No such file or directory\)$"):
        main([command, "--report", str(missing)])
    damaged = tmp_path / "damaged.json"
    damaged.write_text("{")
    with pytest.raises(SystemExit,
                       match=rf"^error: --report {re.escape(str(damaged))}: not a benchmark's JSON"):
        main([command, "--report", str(damaged)])


def test_the_result_records_the_command_without_secrets():
    """benchmark.json records the command line (to rerun it): a secured cluster's -X password or
    an object store key given to Spark stays out of it, and out of a refused --spark-conf."""
    from txkafka.devtools.bench import command_line, spark_conf_pairs

    argv = ["/repo/txkafka/devtools/__main__.py", "bench", "-b", "h:9092", "-X", "sasl.password=BenchPw123",
            "--spark-conf", "spark.hadoop.fs.s3a.secret.key=S3Key456", "--rows", "1000"]
    assert command_line(argv) == ("python -m txkafka.devtools bench -b h:9092 -X sasl.password=[redacted] "
                                  "--spark-conf spark.hadoop.fs.s3a.secret.key=[redacted] "
                                  "--rows 1000")
    assert command_line(["/v/bin/python", "-m", "txkafka.devtools.bench"]) == ""
    with pytest.raises(SystemExit) as refused:
        spark_conf_pairs(["spark.a=b", "spark.hadoop.fs.s3a.secret.key:S3Key456"])
    assert "S3Key456" not in str(refused.value) and "number 2" in str(refused.value)


def test_report_shows_each_readers_query_start_beside_the_python_floor():
    r = _result()
    r["read_start"] = {"what": "seconds from start() to the first batch",
                       "txkafka": {"median_s": 1.04, "runs": [1.02, 1.04, 1.1]},
                       "python_floor": {"median_s": 0.9, "runs": [0.89, 0.9, 0.91]},
                       "kafka": {"median_s": 0.08, "runs": [0.08]}}
    text = report_markdown(r)
    assert "| query start: start() to the first batch | s (median) | runs |" in text
    assert "| txkafka | 1.04 | 1.02, 1.04, 1.10 |" in text
    assert "| python_floor | 0.90 | 0.89, 0.90, 0.91 |" in text
    assert "| kafka | 0.08 | 0.08 |" in text
