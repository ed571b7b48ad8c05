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


def codec_alone(text: str, values: pa.Array, framed: pa.Array, repeats: int) -> dict[str, int]:
    """Rows/s of the steps a read or write task adds, in this process without Spark: the header
    split, the Avro decode, the Avro encode and the header join (where the formats' time goes)."""
    from ..connector.serde import avro
    from ..connector.serde.wire import frame_column, split_column

    codec = avro.codec(text)
    payloads = split_column(framed).payloads
    steps = {"split_header": lambda: split_column(framed),
             "avro_decode": lambda: codec.decode(payloads),
             "avro_encode": lambda: codec.encode(values),
             "frame_header": lambda: frame_column(1, payloads)}
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


def run(ns: argparse.Namespace) -> int:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    from ..connector.serde import avro
    from ..connector.serde.wire import frame_column
    from ..embedded_kafka import EmbeddedKafka
    from ..embedded_registry import EmbeddedRegistry
    from ..kafka_admin import create_topic
    from ..spark_kafka_packages import builtin_kafka_and_avro_conf

    os.makedirs(ns.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="txkafka-bench-formats-")
    say("starting the local Apache Kafka broker and Schema Registry")
    cluster = EmbeddedKafka("bench-formats", 1, progress=lambda m: say("  " + m))
    registry = EmbeddedRegistry("bench-formats", progress=lambda m: say("  " + m))
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": ["txkafka bench-formats", *sys.argv[2:]],
        "machine": machine(external_kafka=False),
        "params": {"rows": ns.rows, "repeats": ns.repeats, "partitions": PARTITIONS},
        "read": {}, "write": {}, "bytes_per_row": {},
    }
    try:
        bootstrap = cluster.start()
        url = registry.start()
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        client = SchemaRegistryClient({"url": url})
        spark = spark_session(False, ns.master, {**builtin_kafka_and_avro_conf(),
                                                 **spark_conf_pairs(ns.spark_conf or [])})
        kafka = {"kafka.bootstrap.servers": bootstrap}
        for shape, schema in SHAPES.items():
            text = json.dumps(schema)
            topic = create_topic({"bootstrap.servers": bootstrap}, f"bench-{shape}",
                                 PARTITIONS, 1)
            sid = client.register_schema(f"{topic}-value", Schema(text, "AVRO"))
            values = records(shape, ns.rows)
            framed = frame_column(sid, avro.codec(text).encode(values).payloads)
            result["bytes_per_row"][shape] = round(framed.nbytes / ns.rows, 1)
            result.setdefault("codec_alone", {})[shape] = codec_alone(text, values, framed,
                                                                      ns.repeats)
            say(f"{shape}: producing {ns.rows:,} records of {result['bytes_per_row'][shape]} B")
            fill(bootstrap, topic, framed)
            del values, framed
            txkafka_src = (spark.readStream.format("txkafka").options(**kafka)
                           .option("subscribe", topic).option("startingOffsets", "earliest"))
            builtin_src = (spark.readStream.format("kafka").options(**kafka)
                           .option("subscribe", topic).option("startingOffsets", "earliest"))
            readers = {
                "txkafka_binary": _Loader(lambda s=txkafka_src: s.load()),
                "txkafka_avro": _Loader(lambda s=txkafka_src: s.option("valueFormat", "avro")
                                        .option("schema.registry.url", url).load()),
                "spark_from_avro": _Loader(lambda s=builtin_src, t=text: s.load().select(
                    "key", from_avro(F.expr("substring(value, 6)"), t).alias("value"))),
            }
            runs: dict[str, list[float]] = {k: [] for k in readers}
            for i in range(ns.repeats + 1):  # the first round warms up, not counted
                for name, loader in readers.items():
                    rate = _available_now_into_noop(f"read {shape} {name}", loader, ns.rows,
                                                    workdir)[0]
                    if i:
                        runs[name].append(rate)
                        say(f"  read {shape} {name}: {rate:,.0f} rows/s")
            result["read"][shape] = {k: round(_median(v)) for k, v in runs.items()}

            df = (spark.read.format("txkafka").options(**kafka).option("subscribe", topic)
                  .option("valueFormat", "avro").option("schema.registry.url", url).load()
                  .select("key", "value").cache())
            assert df.count() == ns.rows
            header = F.lit(b"\x00" + int(sid).to_bytes(4, "big"))
            out = create_topic({"bootstrap.servers": bootstrap}, f"bench-{shape}-out",
                               PARTITIONS, 1)
            writers = {
                "txkafka_avro_at_least_once": lambda: df.write.format("txkafka").options(**kafka)
                .option("topic", out).option("deliveryGuarantee", "at_least_once")
                .option("valueFormat", "avro").option("schema.registry.url", url)
                .option("valueSubject", f"{topic}-value").mode("append").save(),
                "txkafka_avro_exactly_once": lambda: df.write.format("txkafka").options(**kafka)
                .option("topic", out).option("valueFormat", "avro")
                .option("schema.registry.url", url)
                .option("valueSubject", f"{topic}-value").mode("append").save(),
                "spark_to_avro": lambda t=text: df.select(
                    "key", F.concat(header, to_avro(F.col("value"), t)).alias("value"))
                .write.format("kafka").options(**kafka).option("topic", out).save(),
            }
            wruns: dict[str, list[float]] = {k: [] for k in writers}
            for i in range(ns.repeats + 1):
                for name, write in writers.items():
                    began = time.monotonic()
                    write()
                    rate = ns.rows / (time.monotonic() - began)
                    if i:
                        wruns[name].append(rate)
                        say(f"  write {shape} {name}: {rate:,.0f} rows/s")
            result["write"][shape] = {k: round(_median(v)) for k, v in wruns.items()}
            df.unpersist()
        result["ratios"] = {
            shape: {"read_txkafka_avro_vs_spark_from_avro": round(
                        result["read"][shape]["txkafka_avro"]
                        / result["read"][shape]["spark_from_avro"], 2),
                    "read_txkafka_avro_vs_txkafka_binary": round(
                        result["read"][shape]["txkafka_avro"]
                        / result["read"][shape]["txkafka_binary"], 2),
                    "write_txkafka_avro_at_least_once_vs_spark_to_avro": round(
                        result["write"][shape]["txkafka_avro_at_least_once"]
                        / result["write"][shape]["spark_to_avro"], 2)}
            for shape in SHAPES}
        spark.stop()
    finally:
        registry.stop(quiet=True)
        cluster.destroy()
    save_result(result, ns.out, "formats.json", charts, report_markdown)
    return 0


def charts(result: dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, kind in zip(axes, ("read", "write")):
        shapes = list(result[kind])
        systems = list(result[kind][shapes[0]])
        width = 0.8 / len(systems)
        for j, system in enumerate(systems):
            ax.bar([i + j * width for i in range(len(shapes))],
                   [result[kind][s][system] / 1000 for s in shapes], width, label=system)
        ax.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(shapes))], shapes)
        ax.set_ylabel("thousand rows/s")
        ax.set_title(f"Avro {kind} ({result['params']['rows']:,} rows)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "formats.png"), dpi=110)
    plt.close(fig)


def report_markdown(result: dict[str, Any]) -> str:
    lines = ["| shape | B/row | read: txkafka binary | txkafka avro | Spark from_avro | "
             "write: txkafka avro at_least_once | exactly_once | Spark to_avro |",
             "|---|---|---|---|---|---|---|---|"]
    for shape in result["read"]:
        r, w = result["read"][shape], result["write"][shape]
        lines.append(f"| {shape} | {result['bytes_per_row'][shape]} | {r['txkafka_binary']:,} | "
                     f"{r['txkafka_avro']:,} | {r['spark_from_avro']:,} | "
                     f"{w['txkafka_avro_at_least_once']:,} | {w['txkafka_avro_exactly_once']:,} | "
                     f"{w['spark_to_avro']:,} |")
    lines += ["", "| shape | split header | Avro decode | Avro encode | frame header |",
              "|---|---|---|---|---|"]
    for shape, c in result.get("codec_alone", {}).items():
        lines.append(f"| {shape} | {c['split_header']:,} | {c['avro_decode']:,} | "
                     f"{c['avro_encode']:,} | {c['frame_header']:,} |")
    return "\n".join(lines)


def register_cli(developer: argparse._SubParsersAction) -> None:
    p = developer.add_parser("bench-formats", help="benchmark: Avro read and write, txkafka vs "
                                                   "Spark's from_avro/to_avro")
    p.add_argument("--out", default="results/formats", metavar="DIR",
                   help="folder for formats.json and its chart")
    p.add_argument("--rows", type=int, default=1_000_000, metavar="N", help="records per run")
    p.add_argument("--repeats", type=int, default=3, metavar="N",
                   help="runs per system after one warm-up round; the median is reported")
    p.add_argument("--master", default="local[2]", help="Spark master")
    p.add_argument("--spark-conf", action="append", metavar="KEY=VALUE",
                   help="a Spark setting for the session (repeatable)")
    p.set_defaults(func=run)
