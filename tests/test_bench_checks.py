"""The benchmark's refusals: a run whose work cannot be proven complete publishes no figure."""

import time

import pytest

from txkafka.devtools.bench_runs import (
    PROGRESS_KEPT,
    _run_query,
    check_count,
    check_input_rows,
)
from txkafka.devtools.bench import check_latency_samples


def test_count_must_match_exactly():
    check_count("sink x", 1000, 1000)
    with pytest.raises(RuntimeError, match=r"sink x: counted 999 records, expected 1,000 \(records missing\)"):
        check_count("sink x", 999, 1000)
    with pytest.raises(RuntimeError, match=r"duplicates"):
        check_count("sink x", 1001, 1000)


def test_input_rows_add_up_over_every_progress_report():
    progress = [{"numInputRows": 0}, {"numInputRows": 600}, {"numInputRows": 400}]
    check_input_rows("read txkafka", progress, 1000)
    with pytest.raises(RuntimeError, match=r"read kafka: Spark read 600 rows .* expected 1,000"):
        check_input_rows("read kafka", progress[:2], 1000)
    with pytest.raises(RuntimeError, match="expected 900"):
        check_input_rows("read kafka", progress, 900)


def test_input_rows_cannot_be_checked_once_spark_dropped_reports():
    with pytest.raises(RuntimeError, match="cannot be checked"):
        check_input_rows("write x", [{"numInputRows": 1}] * PROGRESS_KEPT, PROGRESS_KEPT)


def test_latency_needs_every_window_record_and_the_full_rate():
    check_latency_samples("lat", 76_000, 76_000, 0, 2000, 40)
    with pytest.raises(RuntimeError, match="5 of the 80,000 records .* never reached"):
        check_latency_samples("lat", 79_995, 80_000, 0, 2000, 40)
    with pytest.raises(RuntimeError, match="feeder fell behind"):
        check_latency_samples("lat", 70_000, 70_000, 0, 2000, 40)
    with pytest.raises(RuntimeError, match="received twice"):
        check_latency_samples("lat", 80_000, 80_000, 3, 2000, 40)


class _Done:
    """A finished query as _run_query sees it."""

    def __init__(self, rows, exc=None):
        self.recentProgress = [{"numInputRows": rows}]
        self.isActive = False
        self._exc = exc

    def awaitTermination(self, timeout):
        return True

    def exception(self):
        return self._exc


def test_run_query_times_until_the_output_is_visible():
    rate, _ = _run_query("write x", lambda: _Done(100), 100, 10, visible=lambda: time.sleep(0.5))
    assert rate < 100 / 0.5


def test_run_query_refuses_a_short_or_failed_query():
    with pytest.raises(RuntimeError, match="write x: Spark read 99 rows"):
        _run_query("write x", lambda: _Done(99), 100, 10)
    with pytest.raises(RuntimeError, match="read y: the query failed: boom"):
        _run_query("read y", lambda: _Done(100, exc="boom"), 100, 10)
