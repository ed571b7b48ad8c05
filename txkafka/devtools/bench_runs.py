"""What every suite of the benchmarks shares, so that a suite's module and ``bench`` (which runs
the suites) import it rather than each other: the systems a write runs into, the order of a round,
and the checks that refuse a figure for work that was not done completely.
"""

from __future__ import annotations

import time
from typing import Any, Callable


def check_count(what: str, got: int, expected: int) -> None:
    """A run's output must hold exactly its input: fewer is data loss, more is duplicates, and
    either would make its rows/s a figure for some other amount of work."""
    if got != expected:
        kind = "records missing" if got < expected else "duplicates"
        raise RuntimeError(f"{what}: counted {got:,} records, expected {expected:,} ({kind}); "
                           "the run's rows/s would be wrong, so the benchmark stops")


# Progress reports a query keeps (spark.sql.streaming.numRecentProgressUpdates, 100 by default).
PROGRESS_KEPT = 10_000


def check_input_rows(what: str, progress: list[dict], expected: int) -> None:
    """A query's progress must account for every input row exactly once: a query that stopped
    early (or read a record twice) would otherwise be timed as if it had done the whole job."""
    if len(progress) >= PROGRESS_KEPT:
        raise RuntimeError(f"{what}: {len(progress)} progress reports, more than Spark keeps "
                           f"({PROGRESS_KEPT}); the rows read cannot be checked")
    got = sum(p.get("numInputRows", 0) for p in progress)
    if got != expected:
        raise RuntimeError(f"{what}: Spark read {got:,} rows (numInputRows over "
                           f"{len(progress)} progress reports), expected {expected:,}")


# Options of every txkafka reader the benchmark starts (``--fetcher``).
TXKAFKA_READ_OPTIONS: dict[str, str] = {}


def _run_query(what: str, start: Callable[[], Any], rows: int, timeout: float,
               visible: Callable[[], None] | None = None) -> tuple[float, Any]:
    """Run a query to its end and return (rows/s, the query). The timer runs from the query's
    start until ``visible`` returns (the output readable by read_committed) when given; the
    query must have read exactly ``rows`` rows, else no figure."""
    started = time.monotonic()
    q = start()
    try:
        if not q.awaitTermination(timeout):
            raise RuntimeError(f"{what}: the query did not finish in {timeout:.0f}s")
    finally:
        if q.isActive:
            q.stop()
    if q.exception() is not None:
        raise RuntimeError(f"{what}: the query failed: {q.exception()}")
    check_input_rows(what, q.recentProgress, rows)
    if visible is not None:
        visible()
    return rows / (time.monotonic() - started), q


# Sink systems of the write, sink and tasks suites: the format and its options beside the
# topic and bootstrap servers. The txkafka systems write with the sink's default producer
# (``producer`` unset: txkafka's own), as a user's query does; "txkafka_exactly_once_librdkafka"
# (--librdkafka-producer) is exactly_once through librdkafka's producer, a named variant.
_SINKS: dict[str, tuple[str, dict[str, str]]] = {
    "txkafka_exactly_once": ("txkafka", {"deliveryGuarantee": "exactly_once"}),
    "txkafka_exactly_once_librdkafka": ("txkafka", {"deliveryGuarantee": "exactly_once",
                                                    "producer": "librdkafka"}),
    "txkafka_at_least_once": ("txkafka", {"deliveryGuarantee": "at_least_once"}),
    "builtin": ("kafka", {})}
LIBRDKAFKA = "txkafka_exactly_once_librdkafka"
# The producer each txkafka system wrote with, as result files record it.
PRODUCERS = {"txkafka_exactly_once": "default (txkafka)", LIBRDKAFKA: "librdkafka",
             "txkafka_at_least_once": "default (txkafka)"}
# Result files written before the systems named the default producer (their params have no
# "producers"): the plain names wrote with librdkafka's, "_wire" with txkafka's.
PRODUCERS_BEFORE = {"txkafka_exactly_once": "librdkafka", "txkafka_at_least_once": "librdkafka",
                    "txkafka_exactly_once_wire": "txkafka"}
# The exactly_once systems and how ratios name them (the bench's and the tasks suite's).
EOS_LABELS = {"txkafka_exactly_once": "exactly_once", LIBRDKAFKA: "exactly_once producer=librdkafka"}


def producers_of(result: dict[str, Any]) -> dict[str, str]:
    """The producer of each txkafka system of a result file, old or new."""
    return (result.get("params") or {}).get("producers") or PRODUCERS_BEFORE


def _rotated(systems: list[tuple[str, str]], i: int) -> list[tuple[str, str]]:
    """Round ``i``'s order: each suite's systems rotated by i, so none always runs first (a cold
    worker, a compaction, a GC pause) or right after the same neighbour. The ceiling's produce
    stays before its consume (which reads what it produced)."""
    out: list[tuple[str, str]] = []
    for suite in dict.fromkeys(s for s, _ in systems):
        group = [x for x in systems if x[0] == suite]
        if suite != "ceiling" and group:
            r = i % len(group)
            group = group[r:] + group[:r]
        out += group
    return out
