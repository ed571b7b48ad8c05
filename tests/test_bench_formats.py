"""bench-formats' report, chart and ratios from a result of every format (its figures come from
real runs: docs/benchmarks.md), and the shared table writer the benchmarks' reports use."""

from __future__ import annotations

import argparse

import pytest

from txkafka.devtools import bench_formats
from txkafka.devtools.bench_tables import cell, markdown_table


def _result(formats: list[str]) -> dict:
    read, write, sizes = {}, {}, {}
    for shape in ("flat", "nested"):
        r, w, b = {}, {}, {}
        for i, fmt in enumerate(formats):
            key = fmt.replace("-", "_")
            r[f"txkafka_binary_{key}" if fmt != "avro" else "txkafka_binary"] = 400_000
            r[f"txkafka_{key}"] = 300_000 - 10_000 * i
            w[f"txkafka_{key}_at_least_once"] = 200_000 + 10_000 * i
            b[key] = 50.0 + 10 * i
        if "avro" in formats:
            r["spark_from_avro"] = 250_000
            w.update(txkafka_avro_exactly_once=190_000, spark_to_avro=160_000)
        read[shape], write[shape], sizes[shape] = r, w, b
    return {"params": {"rows": 1000, "formats": formats}, "read": read, "write": write,
            "bytes_per_row": sizes,
            "codec_alone": {"flat": {"split_header": 9_000_000, "avro_decode": 5_000_000}}}


def test_every_format_has_its_rows_and_ratios_to_the_binary_read(tmp_path):
    result = _result(list(bench_formats.FORMATS))
    ratios = bench_formats.ratios(result)
    assert ratios["nested"]["read_txkafka_avro_vs_spark_from_avro"] == 1.2
    assert ratios["nested"]["write_txkafka_avro_at_least_once_vs_spark_to_avro"] == 1.25
    assert ratios["flat"]["read_txkafka_json_schema_vs_txkafka_binary"] == 0.7
    assert ratios["flat"]["write_txkafka_protobuf_at_least_once_vs_txkafka_binary_read"] == 0.53
    text = bench_formats.report_markdown(result)
    assert "| nested | 50 | 400,000 | 300,000 | 250,000 | 200,000 | 190,000 | 160,000 |" in text
    assert "| json schema | flat | 70 | 400,000 | 280,000 | 0.7 | 220,000 | 0.55 |" in text
    assert "| flat | 9,000,000 | 5,000,000 |" in text
    bench_formats.charts(result, str(tmp_path))
    assert (tmp_path / "formats.png").stat().st_size > 0


def test_without_avro_there_is_no_spark_table():
    text = bench_formats.report_markdown(_result(["protobuf"]))
    assert "Spark from_avro" not in text and "| protobuf | nested |" in text


def test_formats_flag_takes_a_subset_and_names_the_choices():
    assert bench_formats.parse_formats("json-schema, AVRO") == ["avro", "json-schema"]
    with pytest.raises(argparse.ArgumentTypeError, match="avro, protobuf, json-schema"):
        bench_formats.parse_formats("avro,thrift")


def test_cells_separate_thousands_and_keep_ratios():
    assert [cell(v) for v in (1234567, 0.83, 1234.6, None, "x")] == \
        ["1,234,567", "0.83", "1,235", "-", "x"]
    assert markdown_table(["a", "b"], [[1, 2000]]) == "| a | b |\n|---|---|\n| 1 | 2,000 |"
