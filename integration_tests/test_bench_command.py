"""`txkafka bench` end to end on the session broker, sized to seconds: the JSON result and the PNG
chart are written and the core ratios are computed from interleaved runs. (The numbers in
docs/benchmarks.md come from the full-size run; nothing here times anything.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from txkafka.bench import NO_SPARK_RUNS_PER_ROUND

pytestmark = [pytest.mark.kafka]


def test_bench_writes_json_and_charts(kafka, tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "txkafka", "bench", "--bootstrap", kafka.bootstrap, "--rows", "20000",
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
