"""``python -m txkafka.devtools.bench_serde``: rows/s of the Protobuf and JSON Schema codecs,
decode and encode, on a flat 10-field record and a nested one (a struct, lists, a map), without
Kafka or Spark.

Rates are rows per second of the process's CPU time (one thread), the best of a few runs.
Beside each codec: the native step alone (ptars' decode or encode of the message bytes, pyarrow's
JSON reader over the joined text), so the codec's own share shows; and the per-row way it
replaces (the protobuf library's ``FromString`` + ``MessageToDict``, ``json.loads``) on a
sample. Every run's output is checked against the input (row count, no errors, the encoded
column decodes back to the decoded one). JSON and a chart go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

import pyarrow as pa

from ..cli_options import CommandParser
from .bench import machine, save_result, say
from .bench_tables import Panel, grouped_bars, markdown_table

PROTO = """
syntax = "proto3";
package bench;
message Flat { int64 id = 1; string name = 2; double score = 3; bool ok = 4; int32 count = 5;
  string city = 6; int64 ts = 7; float ratio = 8; bytes tag = 9; uint32 flags = 10; }
message Addr { string street = 1; int32 zip = 2; }
message Nested { int64 id = 1; string name = 2; Addr addr = 3; repeated int32 nums = 4;
  repeated Addr others = 5; map<string, string> attrs = 6; double score = 7; bool ok = 8;
  int32 count = 9; string city = 10; }
"""
JSON_FLAT = {"type": "object", "properties": {
    "id": {"type": "integer"}, "name": {"type": "string"}, "score": {"type": "number"},
    "ok": {"type": "boolean"}, "count": {"type": "integer"}, "city": {"type": "string"},
    "ts": {"type": "integer"}, "ratio": {"type": "number"}, "tag": {"type": "string"},
    "flags": {"type": "integer"}}}
JSON_NESTED = {"type": "object", "$defs": {"Addr": {"type": "object", "properties": {
    "street": {"type": "string"}, "zip": {"type": "integer"}}}}, "properties": {
    "id": {"type": "integer"}, "name": {"type": "string"}, "addr": {"$ref": "#/$defs/Addr"},
    "nums": {"type": "array", "items": {"type": "integer"}},
    "others": {"type": "array", "items": {"$ref": "#/$defs/Addr"}},
    "attrs": {"type": "object", "additionalProperties": {"type": "string"}},
    "score": {"type": "number"}, "ok": {"type": "boolean"}, "count": {"type": "integer"},
    "city": {"type": "string"}}}


def _flat(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"name {i}", "score": i * 0.5, "ok": i % 2 == 0, "count": i % 1000,
            "city": "Berlin", "ts": 1_700_000_000_000 + i, "ratio": 0.25, "tag": "abc",
            "flags": i % 7}


def _nested(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"name {i}", "addr": {"street": "Main St", "zip": i % 99999},
            "nums": [i % 5, 1, 2], "others": [{"street": "a", "zip": 1}], "attrs": {"k": "v"},
            "score": 0.5, "ok": True, "count": i, "city": "Paris"}


def _rate(rows: int, fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Rows per second of CPU time (the codecs run on one thread; on a shared machine wall
    time measures the neighbours too), the best of ``repeats`` runs, and the last result."""
    best, out = 0.0, None
    for _ in range(repeats):
        t = time.process_time()
        out = fn()
        best = max(best, rows / max(time.process_time() - t, 1e-9))
    return best, out


def protobuf_suite(rows: int, repeats: int, sample: int) -> dict[str, Any]:
    from google.protobuf import json_format, message_factory

    from ..connector.serde import protobuf

    result: dict[str, Any] = {}
    for name, make in (("flat", _flat), ("nested", _nested)):
        codec = protobuf.codec(PROTO, message=f"bench.{name.capitalize()}")
        cls = message_factory.GetMessageClass(codec.descriptor)
        docs = [make(i) for i in range(rows)]
        if name == "flat":
            for d in docs:
                d["tag"] = d["tag"].encode()
        values = pa.array(docs, codec.arrow_type)
        encoded = codec.encode(values)
        assert not encoded.errors and encoded.payloads.null_count == 0
        payloads = encoded.payloads
        k = len(protobuf.encode_message_indexes(codec.message_indexes))
        bodies = pa.array([p[k:] for p in payloads.to_pylist()[:sample]], pa.binary())
        dec_rate, res = _rate(rows, lambda: codec.decode(payloads), repeats)
        assert not res.errors and res.values.equals(values.cast(codec.arrow_type))
        enc_rate, back = _rate(rows, lambda: codec.encode(res.values), repeats)
        assert back.payloads.equals(payloads)
        native = payloads.to_pylist()
        native_bodies = pa.array([p[k:] for p in native], pa.binary())
        native_dec, batch = _rate(rows, lambda: codec._handler.array_to_record_batch(
            native_bodies), repeats)
        native_enc, _ = _rate(rows, lambda: codec._handler.record_batch_to_array(batch),
                              repeats)
        toy, _ = _rate(sample, lambda: pa.array(
            [json_format.MessageToDict(cls.FromString(b), preserving_proto_field_name=True)
             for b in bodies.to_pylist()]), 1)
        parse_only, _ = _rate(sample, lambda: [cls.FromString(b) for b in bodies.to_pylist()], 1)
        result[name] = {"rows": rows, "bytes_per_row": round(payloads.nbytes / rows, 1),
                        "decode_rows_s": round(dec_rate), "encode_rows_s": round(enc_rate),
                        "ptars_decode_rows_s": round(native_dec),
                        "ptars_encode_rows_s": round(native_enc),
                        "per_row_fromstring_to_dict_rows_s": round(toy),
                        "per_row_fromstring_only_rows_s": round(parse_only)}
        say(f"protobuf {name}: decode {dec_rate:,.0f} rows/s (ptars alone {native_dec:,.0f}), "
            f"encode {enc_rate:,.0f} (ptars alone {native_enc:,.0f}), per-row FromString + "
            f"dict {toy:,.0f}")
    return result


def json_suite(rows: int, repeats: int, sample: int) -> dict[str, Any]:
    import pyarrow.json as pj

    from ..connector.serde import json_schema

    result: dict[str, Any] = {}
    for name, make, schema in (("flat", _flat, JSON_FLAT), ("nested", _nested, JSON_NESTED)):
        codec = json_schema.codec(json.dumps(schema))
        docs = [make(i) for i in range(rows)]
        texts = [json.dumps(d).encode() for d in docs]
        payloads = pa.array(texts, pa.binary())
        joined = b"\n".join(texts) + b"\n"
        dec_rate, res = _rate(rows, lambda: codec.decode(payloads), repeats)
        assert not res.errors and len(res.values) == rows
        enc_rate, back = _rate(rows, lambda: codec.encode(res.values), repeats)
        assert not back.errors and codec.decode(back.payloads).values.equals(res.values)
        reader, _ = _rate(rows, lambda: pj.read_json(pa.BufferReader(joined), parse_options=pj.
                                                      ParseOptions(explicit_schema=codec.
                                                                   _read_schema)), repeats)
        loads, _ = _rate(sample, lambda: [json.loads(t) for t in texts[:sample]], 1)
        dumps, _ = _rate(sample, lambda: [json.dumps(d).encode() for d in docs[:sample]], 1)
        result[name] = {"rows": rows, "bytes_per_row": round(payloads.nbytes / rows, 1),
                        "decode_rows_s": round(dec_rate), "encode_rows_s": round(enc_rate),
                        "read_json_alone_rows_s": round(reader),
                        "per_row_json_loads_rows_s": round(loads),
                        "per_row_json_dumps_rows_s": round(dumps)}
        say(f"json {name}: decode {dec_rate:,.0f} rows/s (read_json alone {reader:,.0f}), "
            f"encode {enc_rate:,.0f}; per row json.loads {loads:,.0f}, json.dumps {dumps:,.0f}")
    return result


def charts(result: dict[str, Any], out: str) -> None:
    pairs = [(fmt, shape) for fmt in ("protobuf", "json_schema") for shape in ("flat", "nested")]
    series = {op: [result[fmt][shape][f"{op}_rows_s"] / 1e6 for fmt, shape in pairs]
              for op in ("decode", "encode")}
    grouped_bars([Panel("record formats, a column at a time",
                        [f"{fmt}\n{shape}" for fmt, shape in pairs], series,
                        "million rows per CPU second (one thread)")],
                 os.path.join(out, "serde.png"), width=8)


def report_markdown(result: dict[str, Any]) -> str:
    rows = []  # rows per CPU second, one thread
    for shape in ("flat", "nested"):
        r = result["protobuf"][shape]
        rows.append(["Protobuf", shape, r["bytes_per_row"], r["decode_rows_s"], r["encode_rows_s"],
                     f"{r['ptars_decode_rows_s']:,} / {r['ptars_encode_rows_s']:,}",
                     r["per_row_fromstring_to_dict_rows_s"]])
    for shape in ("flat", "nested"):
        r = result["json_schema"][shape]
        rows.append(["JSON Schema", shape, r["bytes_per_row"], r["decode_rows_s"],
                     r["encode_rows_s"], f"{r['read_json_alone_rows_s']:,} / -",
                     r["per_row_json_loads_rows_s"]])
    return markdown_table(["format", "record", "bytes/row", "decode rows/s", "encode rows/s",
                           "native step alone (decode / encode)", "per row in Python (decode)"],
                          rows)


def parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="python -m txkafka.devtools.bench_serde", description=__doc__)
    p.add_argument("--out", default="results/serde", metavar="DIR",
                   help="folder for serde.json and its chart")
    p.add_argument("--rows", type=int, default=1_000_000, metavar="N", help="rows per run")
    p.add_argument("--repeats", type=int, default=3, metavar="N", help="runs per measurement")
    p.add_argument("--sample", type=int, default=100_000, metavar="N",
                   help="rows of the per-row Python comparisons")
    return p


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    os.makedirs(ns.out, exist_ok=True)
    sample = min(ns.sample, ns.rows)
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": ["python -m txkafka.devtools.bench_serde", *(argv or sys.argv[1:])],
        "machine": machine(external_kafka=False),
        "params": {"rows": ns.rows, "repeats": ns.repeats, "sample": sample},
    }
    result["protobuf"] = protobuf_suite(ns.rows, ns.repeats, sample)
    result["json_schema"] = json_suite(ns.rows, ns.repeats, sample)
    save_result(result, ns.out, "serde.json", charts, report_markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
