"""``python -m txkafka.devtools.bench_produce``: the exactly-once task write path on librdkafka
(today's KafkaWriter) against txkafka's own producer (connector/client/: record_batch_encoder +
producer), without Spark.

Two measurements, side by side in one session on one broker, runs alternating (A, B, A, B...):
- throughput of one task's transaction, from the producer's start to every record acknowledged
  (init, produce from Arrow batches, flush; the driver's EndTxn is not timed, as it is the same
  for both), over record sizes (100 B, 1 KB, 100 KB) and output partitions (1, 16, 500). Rows per
  run: ``--rows``, capped at ``--mb`` megabytes of values (1M rows of 100 B, 200k of 1 KB, 2,000
  of 100 KB by default);
- a task's start: a new librdkafka producer through init_transactions (KafkaWriter's background
  init: metadata warm-up, init_transactions, the producer id from statistics) against
  InitProducerId on the worker's kept connection (and on a new one, the first task of a worker).

Every run is checked: the transaction is committed, nothing stays open, and the topic holds
exactly the rows written (records + one commit marker per partition, read_committed offsets; the
first run of each configuration is also read back in full). JSON and a chart go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from .. import kafka_admin
from ..cli_options import CommandParser, KafkaConnection, add_kafka_options
from ..connector.secrets_redaction import redact_command_line
from .bench import BenchKafka, _arrow_batches, machine, save_result, say
from .bench_runs import check_count


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _p90(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))] if xs else float("nan")


class Paths:
    """The two write paths against one cluster; a worker's kept link for txkafka's."""

    def __init__(self, k: BenchKafka, workdir: str) -> None:
        from ..connector.client.transactions import TransactionClient
        from ..connector.client.producer import ClusterLink

        self.k = k
        self.conf = k.conf
        self.workdir = workdir
        self.link = ClusterLink(self.conf)
        self.tc = TransactionClient(self.conf)

    def close(self) -> None:
        self.link.close()
        self.tc.close()

    def _sink_config(self, topic: str):
        from ..connector.sink.options import SinkConfig

        return SinkConfig.from_options({**self.k.options,
                                        "topic": topic,
                                        "checkpointLocation": tempfile.mkdtemp(dir=self.workdir)},
                                       streaming=True)

    def librdkafka(self, topic: str, batches: list, tid: str) -> tuple[float, float, Any]:
        from ..connector.sink.task_writer import KafkaWriter, validate_input_schema

        cfg = self._sink_config(topic)
        schema = validate_input_schema({"key": "binary", "value": "binary"}, cfg.topic)
        cpu, started = time.process_time(), time.monotonic()
        w = KafkaWriter(cfg, schema, batch_id=0, partition_id=0, attempt=0, transactional_id=tid)
        c = w.write(batches)
        w.release()
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
        return elapsed, cpu, (c.transactional_id, c.producer_id, c.producer_epoch,
                              sum(len(p) for p in c.topic_partitions.values()))

    def wire(self, topic: str, batches: list, tid: str) -> tuple[float, float, Any]:
        from ..connector.client.producer import WireProducer

        cpu, started = time.process_time(), time.monotonic()
        p = WireProducer(self.conf, transactional_id=tid, link=self.link, where="bench task")
        p.begin()
        for b in batches:
            p.send(topic, b.column(1), keys=b.column(0))
        res = p.flush()
        p.close()
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
        return elapsed, cpu, (res.transactional_id, res.producer_id, res.producer_epoch,
                              sum(len(p) for p in res.topic_partitions.values()))

    def wait_leaders(self, topic: str, parts: int, timeout: float = 60.0) -> None:
        """Untimed: until the new topic's partitions all have leaders in the metadata."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = self.k.admin.list_topics(topic, timeout=10).topics.get(topic)
            if t is not None and t.error is None and len(t.partitions) == parts and all(
                    p.leader >= 0 for p in t.partitions.values()):
                return
            time.sleep(0.05)
        raise RuntimeError(f"topic {topic} has no leaders for its {parts} partitions")

    def drop_topic(self, topic: str) -> None:
        """Best effort: a run's topic goes once checked (the runs write gigabytes in all)."""
        try:
            for f in self.k.admin.delete_topics([topic], operation_timeout=60).values():
                f.result(90)
            self.k.created.remove(topic)
        except Exception as e:  # noqa: BLE001 - left for delete_created at the end
            say(f"  could not delete {topic} now: {e}")

    def commit_and_check(self, what: str, topic: str, txn: tuple, rows: int,
                         full_read: bool) -> None:
        tid, pid, epoch, _parts = txn
        code = self.tc.end_txn(tid, pid, epoch, commit=True)
        if code:
            raise RuntimeError(f"{what}: EndTxn(commit) answered {code}")
        self.k.wait_visible(what, topic, rows)
        # A fresh topic with one committed transaction: each partition written holds its records
        # and one commit marker; the others are empty.
        marks = kafka_admin.watermarks(self.k.conf, topic, "read_uncommitted").values()
        check_count(f"{what} (offsets)", sum(hi - lo - (hi > lo) for lo, hi in marks), rows)
        if full_read:
            self.k.check_output(what, topic, rows)


def throughput(paths: Paths, sizes: list[int], partitions: list[int], rows_max: int, mb: int,
               repeats: int) -> list[dict[str, Any]]:
    out = []
    for size in sizes:
        rows = max(1, min(rows_max, mb * 1_000_000 // size))
        batch_rows = max(1, min(10_000, (8 << 20) // size))
        batches = _arrow_batches(rows, size, batch_rows)
        for parts in partitions:
            runs: dict[str, list[float]] = {"librdkafka": [], "wire": []}
            cpu: dict[str, list[float]] = {"librdkafka": [], "wire": []}
            for r in range(repeats):
                for name in ("librdkafka", "wire"):
                    topic = paths.k.topic(f"bench-produce-{name}", parts)
                    paths.wait_leaders(topic, parts)
                    tid = f"bench-produce-{name}-{uuid.uuid4().hex[:8]}"
                    elapsed, used, txn = getattr(paths, name)(topic, batches, tid)
                    paths.commit_and_check(f"{name} {parts}p {size} B", topic, txn, rows,
                                           full_read=r == 0)
                    runs[name].append(rows / elapsed)
                    cpu[name].append(used / rows * 1e6)
                    paths.drop_topic(topic)
            row = {"value_bytes": size, "partitions": parts, "rows": rows}
            for name in runs:
                row[name] = {"rows_s": _median(runs[name]), "runs": runs[name],
                             "mb_s": _median(runs[name]) * size / 1e6,
                             "cpu_us_per_row": _median(cpu[name])}
            row["ratio"] = row["wire"]["rows_s"] / row["librdkafka"]["rows_s"]
            say(f"  {parts:>3} partitions, {size:>6} B x {rows:,}: librdkafka "
                f"{row['librdkafka']['rows_s']:,.0f} rows/s, txkafka's producer "
                f"{row['wire']['rows_s']:,.0f} rows/s ({row['ratio']:.2f}x); client CPU "
                f"{row['librdkafka']['cpu_us_per_row']:.2f} vs {row['wire']['cpu_us_per_row']:.2f}"
                " us/row")
            out.append(row)
    return out


def startup(paths: Paths, runs: int) -> dict[str, Any]:
    """Milliseconds from nothing to a producer id and epoch, per task."""
    from ..connector.sink.task_writer import KafkaWriter, validate_input_schema
    from ..connector.client.producer import ClusterLink, WireProducer

    topic = paths.k.topic("bench-produce-start", 1)
    paths.wait_leaders(topic, 1)
    cfg = paths._sink_config(topic)
    schema = validate_input_schema({"key": "binary", "value": "binary"}, cfg.topic)
    times: dict[str, list[float]] = {"librdkafka": [], "wire_kept": [], "wire_new_link": []}
    tid_r, tid_w = (f"bench-start-{n}-{uuid.uuid4().hex[:8]}" for n in ("r", "w"))
    for _ in range(runs):
        started = time.monotonic()
        w = KafkaWriter(cfg, schema, batch_id=0, partition_id=0, attempt=0,
                        transactional_id=tid_r)
        w.prepare()
        assert w._init_thread is not None
        w._init_thread.join()
        if w._init_error is not None:
            raise w._init_error
        times["librdkafka"].append((time.monotonic() - started) * 1000)
        w.release()

        started = time.monotonic()
        WireProducer(paths.conf, transactional_id=tid_w, link=paths.link).begin()
        times["wire_kept"].append((time.monotonic() - started) * 1000)

        link = ClusterLink(paths.conf)
        started = time.monotonic()
        WireProducer(paths.conf, transactional_id=tid_w, link=link).begin()
        times["wire_new_link"].append((time.monotonic() - started) * 1000)
        link.close()
    out = {name: {"median_ms": _median(v), "p90_ms": _p90(v), "runs_ms": v}
           for name, v in times.items()}
    out["ratio_kept"] = out["librdkafka"]["median_ms"] / out["wire_kept"]["median_ms"]
    return out


def charts(result: dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["throughput"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    labels = [f"{r['value_bytes']} B\n{r['partitions']} p" for r in rows]
    xs = list(range(len(rows)))
    ax.bar([x - 0.2 for x in xs], [r["librdkafka"]["mb_s"] for r in rows], width=0.4,
           label="KafkaWriter (librdkafka)")
    ax.bar([x + 0.2 for x in xs], [r["wire"]["mb_s"] for r in rows], width=0.4,
           label="txkafka's producer")
    for x, r in zip(xs, rows):
        ax.annotate(f"{r['ratio']:.2f}x", (x + 0.2, r["wire"]["mb_s"]), ha="center",
                    va="bottom", fontsize=7)
    ax.set_xticks(xs, labels, fontsize=7)
    ax.set_ylabel("MB/s of values (init + produce + flush)")
    ax.set_title("one task's exactly-once transaction, no Spark")
    ax.legend(fontsize=8)
    st = result["startup"]
    names = ["librdkafka", "wire_new_link", "wire_kept"]
    ax2.bar(["new librdkafka\nproducer", "InitProducerId,\nnew link", "InitProducerId,\nkept link"],
            [st[n]["median_ms"] for n in names], color=["#c55", "#888", "#2a7"])
    ax2.set_ylabel("ms to a producer id (median)")
    ax2.set_title("a task's start")
    ax2.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "produce.png"), dpi=110)
    plt.close(fig)


def report_markdown(result: dict[str, Any]) -> str:
    lines = ["| value | partitions | rows | KafkaWriter (librdkafka) rows/s | txkafka's producer "
             "rows/s | ratio | client CPU us/row (librdkafka / txkafka) |",
             "|---|---|---|---|---|---|---|"]
    for r in result["throughput"]:
        lines.append(f"| {r['value_bytes']} B | {r['partitions']} | {r['rows']:,} | "
                     f"{r['librdkafka']['rows_s']:,.0f} | {r['wire']['rows_s']:,.0f} | "
                     f"{r['ratio']:.2f} | {r['librdkafka']['cpu_us_per_row']:.2f} / "
                     f"{r['wire']['cpu_us_per_row']:.2f} |")
    st = result["startup"]
    lines += ["", "| a task's start | median ms | p90 ms |", "|---|---|---|"]
    for name, label in (("librdkafka", "new librdkafka producer + init_transactions"),
                        ("wire_new_link", "InitProducerId on a new link (first task of a worker)"),
                        ("wire_kept", "InitProducerId on the worker's kept link")):
        lines.append(f"| {label} | {st[name]['median_ms']:.1f} | {st[name]['p90_ms']:.1f} |")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="python -m txkafka.devtools.bench_produce", description=__doc__)
    add_kafka_options(p, required=False, cluster="run on this Kafka cluster")
    p.add_argument("--out", default="results/produce", metavar="DIR",
                   help="folder for produce.json and its chart")
    p.add_argument("--rows", type=int, default=1_000_000, metavar="N",
                   help="records per throughput run (fewer when --mb caps them)")
    p.add_argument("--mb", type=int, default=200, help="cap of a run's values, in MB")
    p.add_argument("--repeats", type=int, default=3, metavar="N",
                   help="alternating runs per producer")
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 100_000], metavar="BYTES",
                   help="record value sizes to measure")
    p.add_argument("--partitions", type=int, nargs="+", default=[1, 16, 500], metavar="N",
                   help="partition counts of the output topic to measure")
    p.add_argument("--startup-runs", type=int, default=20, metavar="N",
                   help="runs of a task's start per way")
    p.add_argument("--report", metavar="FILE",
                   help="print the tables of an existing produce.json, run nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    if ns.report:
        with open(ns.report) as fh:
            print(report_markdown(json.load(fh)))
        return 0
    from ..embedded_kafka import EmbeddedKafka

    given = KafkaConnection.optional_from_args(ns)
    os.makedirs(ns.out, exist_ok=True)
    cluster = None
    if given is not None:
        conn = given
    else:
        say("starting the local Apache Kafka broker")
        cluster = EmbeddedKafka("bench-produce", 1, progress=lambda m: say("  " + m))
        conn = KafkaConnection.create(cluster.start(), {})
    k = BenchKafka(conn)
    workdir = tempfile.mkdtemp(prefix="txkafka-bench-produce-")
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": redact_command_line(["python -m txkafka.devtools.bench_produce",
                                        *(argv or sys.argv[1:])]),
        "machine": machine(external_kafka=given is not None),
        "params": {"rows": ns.rows, "mb": ns.mb, "repeats": ns.repeats, "sizes": ns.sizes,
                   "partitions": ns.partitions, "startup_runs": ns.startup_runs},
    }
    paths = Paths(k, workdir)
    try:
        say(f"a task's start, {ns.startup_runs} runs each, alternating")
        result["startup"] = startup(paths, ns.startup_runs)
        st = result["startup"]
        say(f"  librdkafka {st['librdkafka']['median_ms']:.1f} ms, InitProducerId on a new link "
            f"{st['wire_new_link']['median_ms']:.1f} ms, on the kept link "
            f"{st['wire_kept']['median_ms']:.1f} ms")
        say("throughput of one task's transaction, runs alternating")
        result["throughput"] = throughput(paths, ns.sizes, ns.partitions, ns.rows, ns.mb,
                                          ns.repeats)
    finally:
        paths.close()
        shutil.rmtree(workdir, ignore_errors=True)
        if cluster is None:
            k.delete_created()
        else:
            cluster.destroy()
    save_result(result, ns.out, "produce.json", charts, report_markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
