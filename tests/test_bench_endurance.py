"""The endurance benchmark's verdict maths: slopes per hour, visibility windows, the report."""

from __future__ import annotations

import os

import pytest

from txkafka.devtools.bench_endurance import (
    SERIES,
    DelayHistogram,
    _Output,
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


def test_delay_histogram_percentiles_to_its_bucket_and_beyond_its_range():
    h = DelayHistogram()
    for d in [1.0] * 98 + [2.5, 300.0]:
        h.add(d)
    assert h.n == 100 and h.max == 300.0
    assert h.percentile(0.5) == pytest.approx(1.01)   # the 10 ms bucket's upper edge
    assert h.percentile(0.98) == pytest.approx(2.51)
    assert h.percentile(0.99) == 300.0                # past 120 s: the exact value
    one = DelayHistogram()
    one.add(0.004)
    assert one.percentile(0.99) == 0.004              # never above the largest delay seen
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0


def test_visibility_windows_by_send_time_from_the_histograms():
    hists = {0: DelayHistogram(), 1: DelayHistogram()}
    for _ in range(60):
        hists[0].add(1.0)
    for i in range(60):
        hists[1].add(float(i))
    w = visibility_windows(hists, window_s=60.0, seconds=120.0)
    assert [(x["from_s"], x["to_s"], x["records"]) for x in w] == [(0, 60, 60), (60, 120, 60)]
    assert w[0]["p99"] == 1.0 and w[1]["max"] == 59.0  # capped at the largest delay seen


class _Msg:
    def __init__(self, key: int, stamp: float) -> None:
        self._k, self._v = b"%d" % key, repr(stamp).encode()

    def error(self):
        return None

    def key(self):
        return self._k

    def value(self):
        return self._v


def test_the_checker_counts_each_record_once_and_keeps_no_per_record_delays(monkeypatch):
    out = _Output.__new__(_Output)  # no consumer: messages are fed by hand
    out.seen, out.received, out.duplicates = bytearray(1), 0, 0
    out.window_s, out.measured_from, out.last_window = 60.0, 1000.0, 1
    from txkafka.devtools.bench_endurance import DelayHistogram as H

    out.startup, out.windows = H(), {}
    msgs = [_Msg(0, 990.0), _Msg(1, 1001.0), _Msg(1, 1001.0), _Msg(20, 1070.0), _Msg(21, 5000.0)]
    out.c = type("C", (), {"consume": lambda self, n, t: msgs})()
    monkeypatch.setattr("time.time", lambda: 5001.0)
    out.poll(0)
    assert out.received == 4 and out.duplicates == 1
    assert out.startup.n == 1                      # sent before the measured run
    assert {w: h.n for w, h in out.windows.items()} == {0: 1, 1: 2}  # late ones: the last window
    assert out.missing(22) == 22 - 4 and out.missing(2) == 0
    assert len(out.seen) <= 8                      # a bit per record


def test_process_meter_reads_this_process_and_nothing_of_a_gone_one():
    me = process_meter(os.getpid())
    assert me["rss_mb"] > 1 and me["threads"] >= 1 and me["fds"] >= 3
    assert process_meter(2 ** 22 + 12345) == {}


def test_report_names_every_sampled_series_and_the_record_counts():
    r = {"setup": {"minutes": 60, "rate": 3000, "trigger_s": 2, "partitions": 6},
         "records": {"sent": 10, "received": 10, "duplicates": 0, "missing": 0},
         "slopes": {k: {"per_hour": 0.0, "mean": 1.0, "first": 1, "last": 1,
                        "relative_per_hour": 0.0} for k in SERIES},
         "startup": {"seconds": 41.0, "records": 90000, "p99": 38.0, "max": 42.0},
         "visibility": [{"from_s": 0, "to_s": 600, "records": 10, "p50": 1.0, "p99": 2.0,
                         "max": 2.5}]}
    text = report_markdown(r)
    assert "0 duplicates, 0 missing" in text
    assert all(label in text for label, _ in SERIES.values())
    assert "| 0-10 min | 10 | 1.00 s | 2.00 s | 2.50 s |" in text
    assert "Start-up before the measured run: 41 s" in text
