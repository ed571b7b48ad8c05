"""``txkafka bench-formats``: rows/s of Avro in Confluent's wire format, read and written by
txkafka (valueFormat=avro, decoded in the read task, encoded in the write task) beside what an
open-source Spark user runs instead: Spark's Kafka connector with ``from_avro`` over
``substring(value, 6)`` and ``to_avro`` behind a ``concat``-ed header (spark-avro, fetched by Maven
for the installed Spark), on a flat 10-field record and a nested one (a struct, arrays, a map).
txkafka's binary read of the same topic is the ceiling. A local Kafka broker and Schema Registry
are started; reads run Trigger.AvailableNow into ``noop``, writes are one ``df.write`` of a cached
DataFrame. JSON and a chart go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from ..cli_options import CommandParser
from .bench import (_available_now_into_noop, machine, save_result, say, spark_conf_pairs,
                    spark_session)
from .bench_tables import Panel, grouped_bars, markdown_table

FLAT = {"type": "record", "name": "Flat", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
    {"name": "score", "type": "double"}, {"name": "ok", "type": "boolean"},
    {"name": "count", "type": "int"}, {"name": "city", "type": "string"},
    {"name": "ts", "type": "long"}, {"name": "ratio", "type": "float"},
    {"name": "tag", "type": "bytes"}, {"name": "flags", "type": "int"}]}
_ADDR = {"type": "record", "name": "Addr", "fields": [
    {"name": "street", "type": "string"}, {"name": "zip", "type": "int"}]}
NESTED = {"type": "record", "name": "Nested", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
    {"name": "addr", "type": _ADDR},
    {"name": "nums", "type": {"type": "array", "items": "int"}},
    {"name": "others", "type": {"type": "array", "items": "Addr"}},
    {"name": "attrs", "type": {"type": "map", "values": "string"}},
    {"name": "score", "type": "double"}, {"name": "ok", "type": "boolean"},
    {"name": "count", "type": "int"}, {"name": "city", "type": "string"}]}
SHAPES = {"flat": FLAT, "nested": NESTED}
PARTITIONS = 4


def _strings(prefix: str, ids: np.ndarray, mod: int) -> pa.Array:
    return pa.array([f"{prefix}{i}" for i in range(mod)], pa.string()).take(pa.array(ids % mod))


def records(shape: str, n: int) -> pa.Array:
    """``n`` values of the shape as an Arrow struct column (no per-row Python)."""
    from ..connector.serde import avro

    ids = np.arange(n, dtype=np.int64)
    common = {"id": pa.array(ids), "name": _strings("name-", ids, 1000),
              "score": pa.array(ids * 0.5), "ok": pa.array(ids % 2 == 0),
              "count": pa.array((ids % 100).astype(np.int32)), "city": _strings("city-", ids, 50)}
    if shape == "flat":
        cols = {**common, "ts": pa.array(ids + 1_700_000_000_000),
                "ratio": pa.array((ids % 10).astype(np.float32) / 10),
                "tag": pa.array([b"tag-a", b"tag-b"], pa.binary()).take(pa.array(ids % 2)),
                "flags": pa.array((ids % 7).astype(np.int32))}
    else:
        addr = pa.StructArray.from_arrays([_strings("street-", ids, 300),
                                           pa.array((ids % 90000).astype(np.int32))],
                                          ["street", "zip"])
        three = np.arange(n + 1, dtype=np.int32) * 3
        nums = pa.ListArray.from_arrays(pa.array(three),
                                        pa.array((np.arange(3 * n) % 1000).astype(np.int32)))
        two = np.arange(n + 1, dtype=np.int32) * 2
        others = pa.ListArray.from_arrays(pa.array(two), addr.take(pa.array(np.arange(2 * n) % n)))
        attrs = pa.MapArray.from_arrays(pa.array(two), _strings("k", np.arange(2 * n), 2),
                                        _strings("v", np.arange(2 * n), 20))
        cols = {"id": common["id"], "name": common["name"], "addr": addr, "nums": nums,
                "others": others, "attrs": attrs, **{k: common[k] for k in
                                                     ("score", "ok", "count", "city")}}
    arrow_type = avro.arrow_type(json.dumps(SHAPES[shape]))
    return pa.StructArray.from_arrays(list(cols.values()), list(cols)).cast(arrow_type)


def fill(bootstrap: str, topic: str, framed: pa.Array) -> None:
    """Produce the framed values round-robin over the topic's partitions."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20,
                  "compression.type": "none", "queue.buffering.max.messages": 1_000_000})
    for i, v in enumerate(framed.to_pylist()):
        while True:
            try:
                p.produce(topic, v, key=str(i).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(120) != 0:
        raise RuntimeError(f"could not produce the bench's records into {topic}")


class _Loader:
    """What ``_available_now_into_noop`` calls ``load()`` on: a stream with a projection."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make

    def load(self) -> Any:
        return self.make()


FORMATS = ("avro", "protobuf", "json-schema")
_SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}


def _key(fmt: str) -> str:
    """A format's name in result keys (``json-schema`` -> ``json_schema``)."""
    return fmt.replace("-", "_")


def schema_text(fmt: str, shape: str) -> str:
    """The registered schema of a format and shape (the same fields in each format)."""
    from .bench_serde import JSON_FLAT, JSON_NESTED, PROTO

    if fmt == "avro":
        return json.dumps(SHAPES[shape])
    if fmt == "protobuf":
        return PROTO
    return json.dumps(JSON_FLAT if shape == "flat" else JSON_NESTED)


def message(fmt: str, shape: str) -> dict[str, str]:
    """The option naming the Protobuf message of the shape (the schema holds both)."""
    return {"valueMessage": f"bench.{shape.capitalize()}"} if fmt == "protobuf" else {}


def format_codec(fmt: str, shape: str):
    from ..connector.serde import avro, json_schema, protobuf

    text = schema_text(fmt, shape)
    if fmt == "avro":
        return avro.codec(text)
    if fmt == "protobuf":
        return protobuf.codec(text, message=message(fmt, shape)["valueMessage"])
    return json_schema.codec(text)


def codec_alone(codecs: dict[str, Any], values: pa.Array, repeats: int) -> dict[str, int]:
    """Rows/s of the steps a read or write task adds, in this process without Spark: the header
    split and join (of the first format's payloads), and each format's decode and encode (where
    the formats' time goes)."""
    from ..connector.serde.wire import frame_column, split_column

    steps: dict[str, Callable[[], Any]] = {}
    for fmt, codec in codecs.items():
        typed = values.cast(codec.arrow_type)
        encoded = codec.encode(typed).payloads
        if not steps:
            framed = frame_column(1, encoded)
            steps["split_header"] = lambda f=framed: split_column(f)
            steps["frame_header"] = lambda p=encoded: frame_column(1, p)
        steps[f"{_key(fmt)}_decode"] = lambda c=codec, p=encoded: c.decode(p)
        steps[f"{_key(fmt)}_encode"] = lambda c=codec, v=typed: c.encode(v)
    out = {}
    for name, step in steps.items():
        times = []
        for _ in range(max(repeats, 1)):
            began = time.perf_counter()
            step()
            times.append(time.perf_counter() - began)
        out[name] = round(len(values) / _median(times))
    return out


def _median(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else float("nan")


def _rounds(what: str, runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, int]:
    """Each system once per round, one untimed warm-up round first; the medians of rows/s."""
    rates: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(repeats + 1):
        for name, run in runs.items():
            rate = run()
            if i:
                rates[name].append(rate)
                say(f"  {what} {name}: {rate:,.0f} rows/s")
    return {k: round(_median(v)) for k, v in rates.items()}


def parse_formats(text: str) -> list[str]:
    """``--formats``: a comma-separated subset of FORMATS, in FORMATS' order."""
    picked = {f.strip().lower() for f in text.split(",") if f.strip()}
    unknown = sorted(picked - set(FORMATS))
    if unknown or not picked:
        raise argparse.ArgumentTypeError(
            f"--formats takes a comma-separated list of {', '.join(FORMATS)}; got {text!r}")
    return [f for f in FORMATS if f in picked]


def run(ns: argparse.Namespace) -> int:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    from ..connector.serde.wire import frame_column
    from ..embedded_kafka import EmbeddedKafka
    from ..embedded_registry import EmbeddedRegistry
    from ..kafka_admin import create_topic
    from ..spark_kafka_packages import builtin_kafka_and_avro_conf

    formats = ns.formats
    os.makedirs(ns.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="txkafka-bench-formats-")
    say("starting the local Apache Kafka broker and Schema Registry")
    cluster = EmbeddedKafka("bench-formats", 1, progress=lambda m: say("  " + m))
    registry = EmbeddedRegistry("bench-formats", progress=lambda m: say("  " + m))
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": ["txkafka bench-formats", *sys.argv[2:]],
        "machine": machine(external_kafka=False),
        "params": {"rows": ns.rows, "repeats": ns.repeats, "partitions": PARTITIONS,
                   "formats": formats},
        "read": {}, "write": {}, "bytes_per_row": {}, "codec_alone": {},
    }
    try:
        bootstrap = cluster.start()
        url = registry.start()
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        client = SchemaRegistryClient({"url": url})
        spark = spark_session(False, ns.master, {
            **(builtin_kafka_and_avro_conf() if "avro" in formats else {}),
            **spark_conf_pairs(ns.spark_conf or [])})
        kafka = {"kafka.bootstrap.servers": bootstrap}
        for shape in SHAPES:
            read, write = result["read"].setdefault(shape, {}), result["write"].setdefault(shape, {})
            sizes = result["bytes_per_row"].setdefault(shape, {})
            values = records(shape, ns.rows)
            codecs = {fmt: format_codec(fmt, shape) for fmt in formats}
            for fmt in formats:
                text, key = schema_text(fmt, shape), _key(fmt)
                topic = create_topic({"bootstrap.servers": bootstrap}, f"bench-{shape}-{fmt}",
                                     PARTITIONS, 1)
                subject = f"{topic}-value"
                sid = client.register_schema(subject, Schema(text, _SCHEMA_TYPES[fmt]))
                encoded = codecs[fmt].encode(values.cast(codecs[fmt].arrow_type))
                if encoded.errors:
                    raise RuntimeError(f"the bench's {shape} records do not encode as {fmt}: "
                                       f"{next(iter(encoded.errors.values()))}")
                framed = frame_column(sid, encoded.payloads)
                sizes[key] = round(framed.nbytes / ns.rows, 1)
                say(f"{shape} {fmt}: producing {ns.rows:,} records of {sizes[key]} B")
                fill(bootstrap, topic, framed)
                del framed, encoded
                opts = {"valueFormat": fmt, "schema.registry.url": url, **message(fmt, shape)}
                # A new reader per run: a DataStreamReader's option() changes the reader itself,
                # so a shared one would decode in the binary run once the decoded run set it.
                def source(name: str, t: str = topic) -> Any:
                    return (spark.readStream.format(name).options(**kafka)
                            .option("subscribe", t).option("startingOffsets", "earliest"))

                readers = {
                    f"txkafka_binary_{key}": _Loader(lambda: source("txkafka").load()),
                    f"txkafka_{key}": _Loader(lambda o=opts: source("txkafka").options(**o)
                                              .load()),
                }
                if fmt == "avro":
                    readers["spark_from_avro"] = _Loader(lambda t=text: source("kafka").load()
                                                         .select("key", from_avro(F.expr(
                                                             "substring(value, 6)"), t)
                                                                 .alias("value")))
                read.update(_rounds(f"read {shape}", {
                    name: lambda n=name, r=reader: _available_now_into_noop(
                        f"read {shape} {n}", r, ns.rows, workdir)[0]
                    for name, reader in readers.items()}, ns.repeats))

                df = (spark.read.format("txkafka").options(**kafka).option("subscribe", topic)
                      .options(**opts).load().select("key", "value").cache())
                assert df.count() == ns.rows
                out = create_topic({"bootstrap.servers": bootstrap}, f"bench-{shape}-{fmt}-out",
                                   PARTITIONS, 1)
                sink = {**kafka, **opts, "topic": out, "valueSubject": subject}
                if fmt != "avro":  # the subject's schema (Avro's is derived from the DataFrame)
                    sink["use.latest.version"] = "true"
                writers: dict[str, Callable[[], Any]] = {
                    f"txkafka_{key}_at_least_once": lambda s=sink: df.write.format("txkafka")
                    .options(**s).option("deliveryGuarantee", "at_least_once")
                    .mode("append").save()}
                if fmt == "avro":
                    header = F.lit(b"\x00" + int(sid).to_bytes(4, "big"))
                    writers["txkafka_avro_exactly_once"] = lambda s=sink: (
                        df.write.format("txkafka").options(**s).mode("append").save())
                    writers["spark_to_avro"] = lambda t=text, h=header: df.select(
                        "key", F.concat(h, to_avro(F.col("value"), t)).alias("value")) \
                        .write.format("kafka").options(**kafka).option("topic", out).save()
                write.update(_rounds(f"write {shape}", {
                    name: lambda w=w: ns.rows / _timed(w) for name, w in writers.items()},
                    ns.repeats))
                df.unpersist()
            if "avro" in formats:  # the Avro topic's binary read keeps its name of before
                read["txkafka_binary"] = read.pop("txkafka_binary_avro")
            result["codec_alone"][shape] = codec_alone(codecs, values, ns.repeats)
            del values
        result["ratios"] = ratios(result)
        spark.stop()
    finally:
        registry.stop(quiet=True)
        cluster.destroy()
    save_result(result, ns.out, "formats.json", charts, report_markdown)
    return 0


def _timed(fn: Callable[[], Any]) -> float:
    began = time.monotonic()
    fn()
    return time.monotonic() - began


def ratios(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per shape: Avro against Spark's from_avro/to_avro (when Avro ran), and each format's read
    and write against txkafka's binary read of the same topic (the ceiling)."""
    out: dict[str, dict[str, float]] = {}
    for shape in result["read"]:
        r, w, mine = result["read"][shape], result["write"][shape], {}
        for fmt in result["params"].get("formats", ["avro"]):
            key = _key(fmt)
            binary = r.get(f"txkafka_binary_{key}") or r["txkafka_binary"]
            mine[f"read_txkafka_{key}_vs_txkafka_binary"] = round(r[f"txkafka_{key}"] / binary, 2)
            mine[f"write_txkafka_{key}_at_least_once_vs_txkafka_binary_read"] = round(
                w[f"txkafka_{key}_at_least_once"] / binary, 2)
        if "spark_from_avro" in r:
            mine["read_txkafka_avro_vs_spark_from_avro"] = round(
                r["txkafka_avro"] / r["spark_from_avro"], 2)
            for guarantee in ("at_least_once", "exactly_once"):
                mine[f"write_txkafka_avro_{guarantee}_vs_spark_to_avro"] = round(
                    w[f"txkafka_avro_{guarantee}"] / w["spark_to_avro"], 2)
        out[shape] = mine
    return out


def charts(result: dict[str, Any], out: str) -> None:
    panels = []
    for kind in ("read", "write"):
        shapes = list(result[kind])
        systems = list(dict.fromkeys(s for shape in shapes for s in result[kind][shape]))
        panels.append(Panel(f"{kind} ({result['params']['rows']:,} rows)", shapes,
                            {s: [(result[kind][shape].get(s) or 0) / 1000 for shape in shapes]
                             for s in systems}, "thousand rows/s"))
    grouped_bars(panels, os.path.join(out, "formats.png"))


def _sizes(result: dict[str, Any], shape: str) -> dict[str, Any]:
    sizes = result["bytes_per_row"][shape]
    return sizes if isinstance(sizes, dict) else {"avro": sizes}  # a result of Avro only


def report_markdown(result: dict[str, Any]) -> str:
    """The Avro table against Spark (when Avro ran), every format's read and write against the
    binary read of its topic, and the codec steps alone."""
    parts = []
    formats = [_key(f) for f in result["params"].get("formats", ["avro"])]
    if any("spark_from_avro" in r for r in result["read"].values()):
        parts.append(markdown_table(
            ["shape", "B/row", "read: txkafka binary", "txkafka avro", "Spark from_avro",
             "write: txkafka avro at_least_once", "exactly_once", "Spark to_avro"],
            [[shape, _sizes(result, shape)["avro"], r["txkafka_binary"], r["txkafka_avro"],
              r["spark_from_avro"], w["txkafka_avro_at_least_once"],
              w["txkafka_avro_exactly_once"], w["spark_to_avro"]]
             for shape, r, w in ((s, result["read"][s], result["write"][s])
                                 for s in result["read"])]))
    rows = []
    for shape in result["read"]:
        r, w = result["read"][shape], result["write"][shape]
        for key in formats:
            binary = r.get(f"txkafka_binary_{key}") or r["txkafka_binary"]
            rows.append([key.replace("_", " "), shape, _sizes(result, shape).get(key), binary,
                         r[f"txkafka_{key}"], round(r[f"txkafka_{key}"] / binary, 2),
                         w[f"txkafka_{key}_at_least_once"],
                         round(w[f"txkafka_{key}_at_least_once"] / binary, 2)])
    parts.append(markdown_table(["format", "shape", "B/row", "read: txkafka binary",
                                 "txkafka decoded", "/ binary", "write: at_least_once",
                                 "/ binary read"], rows))
    alone = result.get("codec_alone") or {}
    if alone:
        steps = list(dict.fromkeys(k for c in alone.values() for k in c))
        parts.append(markdown_table(["shape", *[k.replace("_", " ") for k in steps]],
                                    [[shape, *[c.get(k) for k in steps]]
                                     for shape, c in alone.items()]))
    return "\n\n".join(parts)


def register_cli(developer: argparse._SubParsersAction) -> None:
    p = developer.add_parser("bench-formats", help="benchmark: Avro, Protobuf and JSON Schema "
                                                   "read and write; Avro vs Spark's "
                                                   "from_avro/to_avro")
    p.add_argument("--out", default="results/formats", metavar="DIR",
                   help="folder for formats.json and its chart")
    p.add_argument("--rows", type=int, default=1_000_000, metavar="N", help="records per run")
    p.add_argument("--repeats", type=int, default=3, metavar="N",
                   help="runs per system after one warm-up round; the median is reported")
    p.add_argument("--formats", type=parse_formats, default=list(FORMATS), metavar="LIST",
                   help="comma-separated formats to run: avro, protobuf, json-schema "
                        "(default: all; Spark's from_avro/to_avro run with avro)")
    p.add_argument("--master", default="local[2]", help="Spark master")
    p.add_argument("--spark-conf", action="append", metavar="KEY=VALUE",
                   help="a Spark setting for the session (repeatable)")
    p.set_defaults(func=run)
