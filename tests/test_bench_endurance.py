"""The endurance benchmark's verdict maths: slopes per hour, visibility windows, the report."""

from __future__ import annotations

import os
from array import array

import pytest

from txkafka.bench_endurance import (
    SERIES,
    percentile,
    process_meter,
    report_markdown,
    slope_per_hour,
    slopes,
    visibility_windows,
)


def test_slope_per_hour_of_a_line_and_of_a_flat_series():
    ts = [0.0, 600.0, 1200.0, 1800.0]
    assert slope_per_hour(ts, [100.0, 110.0, 120.0, 130.0]) == pytest.approx(60.0)
    assert slope_per_hour(ts, [5.0, 5.0, 5.0, 5.0]) == 0.0
    assert slope_per_hour([0.0], [1.0]) == 0.0  # one point: no slope, not a division by zero


def test_slopes_leave_out_the_warm_up():
    # Memory climbs in the first 5 minutes (JIT, Python workers start), then stays flat.
    samples = [{"t": t, "jvm_rss_mb": (400.0 if t >= 300 else 100.0 + t)} for t in range(0, 3600, 60)]
    got = slopes(samples, warmup_s=300)
    assert got["jvm_rss_mb"]["per_hour"] == 0.0 and got["jvm_rss_mb"]["first"] == 400.0
    assert slopes(samples, warmup_s=0)["jvm_rss_mb"]["per_hour"] > 0
    assert set(got) == {"jvm_rss_mb"}  # series not sampled are left out


def test_visibility_windows_split_by_send_time():
    stamps = array("d", [100.0 + i for i in range(120)])
    delays = array("d", [1.0] * 60 + [float(i) for i in range(60)])
    w = visibility_windows(stamps, delays, start=100.0, end=220.0, window_s=60.0)
    assert [(x["from_s"], x["to_s"], x["records"]) for x in w] == [(0, 60, 60), (60, 120, 60)]
    assert w[0]["p99"] == 1.0 and w[1]["max"] == 59.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0


def test_process_meter_reads_this_process_and_nothing_of_a_gone_one():
    me = process_meter(os.getpid())
    assert me["rss_mb"] > 1 and me["threads"] >= 1 and me["fds"] >= 3
    assert process_meter(2 ** 22 + 12345) == {}


def test_report_names_every_sampled_series_and_the_record_counts():
    r = {"setup": {"minutes": 60, "rate": 3000, "trigger_s": 2, "partitions": 6},
         "records": {"sent": 10, "received": 10, "duplicates": 0, "missing": 0},
         "slopes": {k: {"per_hour": 0.0, "mean": 1.0, "first": 1, "last": 1,
                        "relative_per_hour": 0.0} for k in SERIES},
         "visibility": [{"from_s": 0, "to_s": 600, "records": 10, "p50": 1.0, "p99": 2.0,
                         "max": 2.5}]}
    text = report_markdown(r)
    assert "0 duplicates, 0 missing" in text
    assert all(label in text for label, _ in SERIES.values())
    assert "| 0-10 min | 10 | 1.00 s | 2.00 s | 2.50 s |" in text
