"""``python -m txkafka.devtools.bench_avro``: the Avro codec's rows per second of one core,
decode and encode, on a flat record and a nested one, beside fastavro (if installed) on the
same payloads.

The flat record has ten fields (long, int, double, a ~10-character string, boolean, nullable
string, enum, timestamp-millis, float, long); the nested one a nested record, an array of
three records and a map of two entries. Values are random (numpy); the payloads are the codec's
own encoding, checked against fastavro on a sample when it is installed. Each measurement is
the fastest of ``--repeats`` runs in CPU time of this process (the machine may be shared), and
the decoded column must equal the encoded one. A per-field split of the flat decode says where
the time goes. JSON and a chart go to ``--out``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from ..connector.serde import avro
from .bench import save_result, say
from .bench_tables import Panel, grouped_bars, markdown_table

FLAT = {"type": "record", "name": "Flat", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"},
    {"name": "n", "type": "int"},
    {"name": "x", "type": "double"},
    {"name": "s", "type": "string"},
    {"name": "ok", "type": "boolean"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "score", "type": "float"},
    {"name": "seq", "type": "long"},
]}

NESTED = {"type": "record", "name": "Order", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
        {"name": "name", "type": "string"},
        {"name": "tier", "type": ["null", "int"], "default": None}]}},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line",
                                                          "fields": [
        {"name": "sku", "type": "string"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "double"}]}}},
    {"name": "attrs", "type": {"type": "map", "values": "string"}},
]}


def _strings(rng: np.random.Generator, n: int, lo: int, hi: int) -> pa.Array:
    lens = rng.integers(lo, hi + 1, n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=offsets[1:])
    data = rng.integers(97, 123, int(offsets[-1]), dtype=np.uint8)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(data)])


def _with_nulls(rng: np.random.Generator, arr: pa.Array, share: float) -> pa.Array:
    valid = rng.random(len(arr)) >= share
    return pa.Array.from_buffers(arr.type, len(arr), [pa.py_buffer(np.packbits(
        valid, bitorder="little")), *arr.buffers()[1:]], null_count=int((~valid).sum()))


def flat_values(n: int, seed: int = 1) -> pa.Array:
    rng = np.random.default_rng(seed)
    t = avro.arrow_type(json.dumps(FLAT))
    ts = (1_700_000_000_000 + rng.integers(0, 10**11, n)) * 1000
    cols = [pa.array(rng.integers(-2**40, 2**40, n)),
            pa.array(rng.integers(-1000, 100_000, n).astype(np.int32)),
            pa.array(rng.random(n) * 1000),
            _strings(rng, n, 8, 12),
            pa.array(rng.random(n) < 0.5),
            _with_nulls(rng, _strings(rng, n, 5, 15), 0.3),
            pa.array(np.array(["A", "B", "C"])[rng.integers(0, 3, n)]),
            pa.array(ts).cast(pa.timestamp("us", tz="UTC")),
            pa.array(rng.random(n).astype(np.float32)),
            pa.array(np.arange(n, dtype=np.int64))]
    return pa.StructArray.from_arrays(cols, fields=list(t))


def nested_values(n: int, seed: int = 2) -> pa.Array:
    rng = np.random.default_rng(seed)
    t = avro.arrow_type(json.dumps(NESTED))
    customer = pa.StructArray.from_arrays(
        [_strings(rng, n, 5, 12), _with_nulls(rng, pa.array(rng.integers(0, 5, n).astype(
            np.int32)), 0.5)], fields=list(t.field("customer").type))
    k = 3 * n
    line_t = t.field("lines").type.value_type
    lines_flat = pa.StructArray.from_arrays(
        [_strings(rng, k, 6, 6), pa.array(rng.integers(1, 20, k).astype(np.int32)),
         pa.array(rng.random(k) * 100)], fields=list(line_t))
    lines = pa.ListArray.from_arrays(pa.array(np.arange(0, k + 1, 3, dtype=np.int32)),
                                     lines_flat, type=t.field("lines").type)
    m = 2 * n
    attrs = pa.MapArray.from_arrays(pa.array(np.arange(0, m + 1, 2, dtype=np.int32)),
                                    pa.array(np.array(["color", "size"])[np.arange(m) % 2]),
                                    _strings(rng, m, 3, 8), type=t.field("attrs").type)
    return pa.StructArray.from_arrays(
        [pa.array(rng.integers(0, 2**50, n)), customer, lines, attrs], fields=list(t))


def _fastest(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeats):
        started = time.process_time()
        out = fn()
        best = min(best, time.process_time() - started)
    return best, out


def _fastavro_check(schema: dict, payloads: pa.Array, values: pa.Array, sample: int) -> None:
    """The codec's payloads equal fastavro's for a sample (when fastavro is installed)."""
    try:
        import fastavro
    except ImportError:
        return
    parsed = fastavro.parse_schema(schema)
    step = max(1, len(payloads) // sample)
    for i in range(0, len(payloads), step):
        record = fastavro.schemaless_reader(io.BytesIO(payloads[i].as_py()), parsed, None)
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        if out.getvalue() != payloads[i].as_py():
            raise AssertionError(f"row {i}: the codec's payload differs from fastavro's")


def _fastavro_rates(schema: dict, payloads: pa.Array, rows: int) -> dict[str, float] | None:
    try:
        import fastavro
    except ImportError:
        return None
    parsed = fastavro.parse_schema(schema)
    raw = payloads.slice(0, rows).to_pylist()
    started = time.process_time()
    records = [fastavro.schemaless_reader(io.BytesIO(p), parsed, None) for p in raw]
    decode_s = time.process_time() - started
    started = time.process_time()
    for r in records:
        fastavro.schemaless_writer(io.BytesIO(), parsed, r)
    encode_s = time.process_time() - started
    return {"rows": len(raw), "decode_rows_s": len(raw) / decode_s,
            "encode_rows_s": len(raw) / encode_s}


def measure(name: str, schema: dict, values: pa.Array, repeats: int,
            fastavro_rows: int) -> dict[str, Any]:
    c = avro.AvroCodec(json.dumps(schema))
    n = len(values)
    enc_s, enc = _fastest(lambda: c.encode(values), repeats)
    if enc.errors:
        raise AssertionError(f"{name}: encode errors {list(enc.errors.items())[:3]}")
    dec_s, dec = _fastest(lambda: c.decode(enc.payloads), repeats)
    if dec.errors or not dec.values.equals(values):
        raise AssertionError(f"{name}: the decoded column differs from the encoded one")
    _fastavro_check(schema, enc.payloads, values, 200)
    out = {"rows": n, "payload_bytes_per_row": round(len(enc.payloads.buffers()[2]) / n, 1),
           "decode_rows_s": n / dec_s, "encode_rows_s": n / enc_s,
           "decode_cpu_ns_per_row": dec_s / n * 1e9, "encode_cpu_ns_per_row": enc_s / n * 1e9,
           "fastavro": _fastavro_rates(schema, enc.payloads, fastavro_rows)}
    say(f"{name}: decode {out['decode_rows_s'] / 1e6:.2f} M rows/s, encode "
        f"{out['encode_rows_s'] / 1e6:.2f} M rows/s (one core, CPU time)")
    return out


def field_split(values: pa.Array, repeats: int) -> dict[str, float]:
    """CPU ms of decoding each field of the flat record alone (a one-field record)."""
    out = {}
    for i, f in enumerate(FLAT["fields"]):
        schema = dict(FLAT, fields=[f])
        col = pa.StructArray.from_arrays([values.field(i)], fields=[values.type.field(i)])
        c = avro.AvroCodec(json.dumps(schema))
        payloads = c.encode(col).payloads
        secs, _ = _fastest(lambda: c.decode(payloads), repeats)
        out[f["name"]] = round(secs * 1e3, 1)
    return out


def charts(result: dict[str, Any], out: str) -> None:
    labels = [f"{shape}\n{op}" for shape in ("flat", "nested") for op in ("decode", "encode")]
    ours = [result[shape][f"{op}_rows_s"] / 1e6 for shape in ("flat", "nested")
            for op in ("decode", "encode")]
    theirs = [(result[shape]["fastavro"] or {}).get(f"{op}_rows_s", 0) / 1e6
              for shape in ("flat", "nested") for op in ("decode", "encode")]
    grouped_bars([Panel("Avro codec", labels, {"txkafka (column-wise numpy)": ours,
                                               "fastavro (per record)": theirs},
                        "million rows/s, one core (CPU time)")],
                 os.path.join(out, "avro.png"), width=8)


def report_markdown(result: dict[str, Any]) -> str:
    rows = []
    for shape in ("flat", "nested"):
        r = result[shape]
        fa = r["fastavro"] or {}
        rows.append([shape, r["payload_bytes_per_row"], r["decode_rows_s"], r["encode_rows_s"],
                     fa.get("decode_rows_s", 0), fa.get("encode_rows_s", 0)])
    text = markdown_table(["record", "bytes/row", "decode rows/s", "encode rows/s",
                           "fastavro decode", "fastavro encode"], rows)
    split = result.get("flat_decode_ms_by_field") or {}
    if split:
        text += "\n\n" + markdown_table(["flat field", "decode CPU ms"], list(split.items()))
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m txkafka.devtools.bench_avro", description=__doc__)
    p.add_argument("--rows", type=int, default=1_000_000, help="records per measurement")
    p.add_argument("--repeats", type=int, default=5, help="runs per measurement (fastest kept)")
    p.add_argument("--fastavro-rows", type=int, default=50_000,
                   help="records fastavro decodes and encodes (0: skip)")
    p.add_argument("--out", default="results/avro", metavar="DIR",
                   help="folder for avro.json and its chart")
    ns = p.parse_args(argv)
    os.makedirs(ns.out, exist_ok=True)
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(["python -m txkafka.devtools.bench_avro", *(argv or sys.argv[1:])]),
        "machine": {"cpus": os.cpu_count(), "load_1m": os.getloadavg()[0],
                    "numpy": np.__version__, "pyarrow": pa.__version__},
        "params": {"rows": ns.rows, "repeats": ns.repeats},
    }
    flat = flat_values(ns.rows)
    result["flat"] = measure("flat", FLAT, flat, ns.repeats, ns.fastavro_rows)
    result["nested"] = measure("nested", NESTED, nested_values(ns.rows), ns.repeats,
                               ns.fastavro_rows)
    result["flat_decode_ms_by_field"] = field_split(flat, ns.repeats)
    save_result(result, ns.out, "avro.json", charts, report_markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
