"""What make test's version matrix runs on the oldest Kafka tested: the tests marked
``kafka_matrix`` must keep covering the claims the user guide makes for that release."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_matrix_covers_exactly_once_reader_transactions_and_recovery():
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--noconftest",
         "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "kafka_matrix", "integration_tests"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ids = [line.split("::", 1) for line in out.stdout.splitlines() if "::" in line]
    files = {path.removeprefix("integration_tests/") for path, _ in ids}
    tests = {name for _, name in ids}
    assert files == {
        "test_kafka_broker.py",          # the broker is the release the run names
        "test_sink_core_kafka.py",       # driver-side EndTxn, validation, sweep, loss detection
        "test_writer_exactly_once.py",   # Spark pipelines under task, commit and driver failures
        "test_reader_transactions.py",   # markers, aborted records, the LSO, replays
        "test_reader_crash_restart.py",  # a killed driver's replay
        "test_late_transactions.py",     # follow-up sweeps; the partition-verification start check
    }
    for name in ("test_the_broker_runs_the_release_the_run_names",
                 "test_driver_killed_between_two_endtxn_calls_recovers_exactly_once",
                 "test_failing_batch_commit_fails_the_query_and_the_restart_is_exactly_once",
                 "test_broker_timeout_after_decision_is_detected_recorded_and_redone",
                 "test_at_least_once_writes_without_transactions",
                 "test_committed_records_only_with_batch_boundaries_on_markers_and_restarts",
                 "test_sigkill_mid_batch_then_restart[2]",
                 "test_brokers_that_can_leave_hanging_transactions_are_refused"):
        assert name in tests, (name, sorted(tests))
