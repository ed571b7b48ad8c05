"""The record formats' benchmark runs end to end on a few rows (its figures come from real runs:
docs/benchmarks.md), so it does not rot between runs."""

from __future__ import annotations

import json

from txkafka.devtools import bench_serde


def test_bench_serde_writes_its_result(tmp_path, capsys):
    assert bench_serde.main(["--rows", "300", "--repeats", "1", "--sample", "100",
                             "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "serde.json").read_text())
    for fmt in ("protobuf", "json_schema"):
        for shape in ("flat", "nested"):
            r = result[fmt][shape]
            assert r["rows"] == 300 and r["decode_rows_s"] > 0 and r["encode_rows_s"] > 0
    assert (tmp_path / "serde.png").stat().st_size > 0
    assert "| Protobuf | nested |" in capsys.readouterr().out
