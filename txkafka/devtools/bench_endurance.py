"""The endurance benchmark: one exactly-once stream for an hour, and what grows while it runs.

    python -m txkafka.devtools bench-endurance --minutes 60 --rate 3000 --out docs/benchmarks/endurance

Kafka -> txkafka source -> txkafka sink (exactly_once) at a steady input rate on a 3-node cluster
(started here unless ``--bootstrap-servers`` names one). Every ``--sample-s`` seconds it records the
driver JVM's and the Python processes' memory, open files and threads, the sink's commit log
(files, bytes) and the sink's transactional ids the brokers know; a read_committed consumer stamps
each output record's visibility delay and checks that every input record arrives exactly once.
The hour starts once the stream has caught up with what was sent while the query started (the
start-up is reported on its own). The result is the slope of each resource per hour (least
squares after the warm-up) and the p99 visibility of each 10-minute window: a leak shows as a
slope, a slowdown as a later window's p99. The checker keeps a bit per record and a delay
histogram per window, so its own memory does not grow with the records (the driver's Python
process is one of the series). JSON + a PNG chart under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from array import array
from pathlib import Path
from typing import Any

from .. import kafka_admin
from ..cli_options import KafkaConnection, add_kafka_options
from .bench_runs import TXKAFKA_READ_OPTIONS
from .bench import _stop_between_batches, read_result, require_charts, say, spark_session
from ..kafka_admin import QUIET as _quiet

# What the run samples, by group: (label, unit).
SERIES = {
    "jvm_rss_mb": ("driver JVM resident memory", "MB"),
    # Resident memory follows the heap the JVM commits (it grows and gives back in steps); the
    # heap in use at its lowest in each sample interval (just after a collection) is the live set.
    "jvm_heap_floor_mb": ("driver JVM heap in use, lowest per interval", "MB"),
    "jvm_fds": ("driver JVM open files", "files"),
    "jvm_threads": ("driver JVM threads", "threads"),
    "py_rss_mb": ("Spark's Python processes, resident memory", "MB"),
    "py_fds": ("Spark's Python processes, open files", "files"),
    "py_threads": ("Spark's Python processes, threads", "threads"),
    "py_processes": ("Spark's Python processes", "processes"),
    "driver_py_rss_mb": ("the driver's Python process, resident memory", "MB"),
    "commit_log_files": ("sink commit log files", "files"),
    "commit_log_kb": ("sink commit log size", "KB"),
    "checkpoint_files": ("whole checkpoint files", "files"),
    "txn_ids": ("the sink's transactional ids known to the brokers", "ids"),
}
WINDOW_S = 600.0  # visibility percentiles per 10 minutes (shorter runs: a sixth of the run)
BUCKET_S = 0.01   # delay histogram resolution
BUCKETS = 12_000  # ... up to 120 s; longer delays are kept one by one
STARTUP_LIMIT_S = 600.0  # the stream must catch up with its input within this


# ----------------------------------------------------------------------------- process meters

def _status(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids  # the process ended since it was listed
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return kids


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for kid in _children(todo.pop()):
            out.append(kid)
            todo.append(kid)
    return out


def process_meter(pid: int) -> dict[str, float]:
    """Resident memory (MB), open files and threads of one process; {} once it is gone."""
    try:
        st = _status(pid)
        return {"rss_mb": int(st["VmRSS"].split()[0]) / 1024, "threads": int(st["Threads"]),
                "fds": len(os.listdir(f"/proc/{pid}/fd"))}
    except (OSError, KeyError, ValueError):
        return {}


def spark_jvm_pid(spark) -> int:
    """The driver JVM PySpark started (``spark-submit`` execs java, else its java child)."""
    pid = spark.sparkContext._gateway.proc.pid
    for cand in [pid, *_descendants(pid)]:
        try:
            if Path(f"/proc/{cand}/comm").read_text().strip() == "java":
                return cand
        except OSError:
            continue
    raise RuntimeError(f"no java process under the Spark launcher (pid {pid})")


def python_processes(jvm_pid: int) -> list[int]:
    """Spark's Python processes: daemons, workers and the streaming source's planner."""
    out = []
    for pid in _descendants(jvm_pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"python" in cmd.split(b"\0", 1)[0]:
            out.append(pid)
    return out


def tree_size(root: Path) -> tuple[int, int]:
    files = size = 0
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            try:
                size += os.stat(os.path.join(dirpath, n)).st_size
                files += 1
            except OSError:
                pass  # removed by Spark's log cleanup meanwhile
    return files, size


# ----------------------------------------------------------------------------- verdict maths

def slope_per_hour(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` against ``ts`` (seconds), per hour."""
    n = len(ts)
    if n < 2:
        return 0.0
    mt, my = sum(ts) / n, sum(ys) / n
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return 0.0
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var * 3600.0


def slopes(samples: list[dict[str, float]], warmup_s: float) -> dict[str, dict[str, float]]:
    """Per series: the slope per hour after the warm-up, the mean, and the slope relative to it."""
    kept = [s for s in samples if s["t"] >= warmup_s]
    out: dict[str, dict[str, float]] = {}
    for key in SERIES:
        pts = [(s["t"], s[key]) for s in kept if key in s]
        if len(pts) < 2:
            continue
        ts, ys = [p[0] for p in pts], [p[1] for p in pts]
        per_h = slope_per_hour(ts, ys)
        mean = sum(ys) / len(ys)
        out[key] = {"per_hour": round(per_h, 3), "mean": round(mean, 3),
                    "first": ys[0], "last": ys[-1],
                    "relative_per_hour": round(per_h / mean, 4) if mean else 0.0}
    return out


def percentile(xs: list[float], p: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(p * len(ys)))]


class DelayHistogram:
    """Visibility delays of one window in 10 ms buckets (up to 120 s, the rest kept exactly):
    constant memory however many records, percentiles to the bucket's upper edge."""

    def __init__(self) -> None:
        self.counts = array("q", bytes(8 * BUCKETS))
        self.over: list[float] = []
        self.n = 0
        self.max = 0.0

    def add(self, delay: float) -> None:
        self.n += 1
        self.max = max(self.max, delay)
        b = int(max(delay, 0.0) / BUCKET_S)
        if b < BUCKETS:
            self.counts[b] += 1
        else:
            self.over.append(delay)

    def percentile(self, p: float) -> float:
        rank = min(self.n - 1, int(p * self.n))  # as percentile(): the element at that rank
        seen = 0
        for b, c in enumerate(self.counts):
            seen += c
            if seen > rank:
                return min((b + 1) * BUCKET_S, self.max)
        return sorted(self.over)[rank - seen]


def visibility_windows(hists: dict[int, DelayHistogram], window_s: float,
                       seconds: float) -> list[dict[str, float]]:
    """p50/p99/max visibility delay of the records sent in each window of the measured run."""
    out = []
    for w in sorted(hists):
        h = hists[w]
        if h.n:
            out.append({"from_s": round(w * window_s, 1),
                        "to_s": round(min((w + 1) * window_s, max(seconds, w * window_s)), 1),
                        "records": h.n, "p50": round(h.percentile(0.5), 3),
                        "p99": round(h.percentile(0.99), 3), "max": round(h.max, 3)})
    return out


# ----------------------------------------------------------------------------- the run

class _Output:
    """The read_committed consumer: exactly-once by key (a bit per record) and each record's
    delay in the histogram of the window it was sent in (sent before the measured hour: the
    start-up's)."""

    def __init__(self, conf: dict[str, str], topic: str, partitions: int,
                 window_s: float) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.c = Consumer({**conf, "group.id": f"endur-{uuid.uuid4()}",
                           "isolation.level": "read_committed", "logger": _quiet})
        self.c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.seen = bytearray(1 << 17)
        self.received = self.duplicates = 0
        self.window_s = window_s
        self.measured_from: float | None = None  # set when the hour starts
        self.last_window = 0                     # ... with the index of its last window
        self.startup = DelayHistogram()
        self.windows: dict[int, DelayHistogram] = {}

    def poll(self, timeout: float) -> None:
        for m in self.c.consume(5000, timeout):
            if m.error():
                continue
            now = time.time()
            i = int(m.key())
            byte, bit = i >> 3, 1 << (i & 7)
            if byte >= len(self.seen):
                self.seen.extend(bytes(max(len(self.seen), byte + 1 - len(self.seen))))
            if self.seen[byte] & bit:
                self.duplicates += 1
                continue
            self.seen[byte] |= bit
            self.received += 1
            stamp = float(m.value())
            if self.measured_from is None or stamp < self.measured_from:
                self.startup.add(now - stamp)
            else:
                w = min(int((stamp - self.measured_from) // self.window_s), self.last_window)
                self.windows.setdefault(w, DelayHistogram()).add(now - stamp)

    def missing(self, sent: int) -> int:
        whole, rest = divmod(sent, 8)
        got = int.from_bytes(self.seen[:whole], "little").bit_count()
        if rest and whole < len(self.seen):
            got += (self.seen[whole] & ((1 << rest) - 1)).bit_count()
        return sent - got


class _HeapFloor:
    """The driver JVM's heap in use (Runtime total - free, through py4j) once a second, and its
    lowest value since the last sample: just after a collection, the live set."""

    def __init__(self, spark) -> None:
        self.runtime = spark._jvm.java.lang.Runtime.getRuntime()
        self.low: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="endurance-heap", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                used = (self.runtime.totalMemory() - self.runtime.freeMemory()) / 2**20
            except Exception:  # noqa: BLE001 - the JVM is stopping
                return
            self.low = used if self.low is None else min(self.low, used)

    def take(self) -> float | None:
        low, self.low = self.low, None
        return None if low is None else round(low, 1)


def run(ns: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer

    from ..connector.client.transactions import TransactionClient

    cluster = None
    conn = KafkaConnection.optional_from_args(ns)
    if conn is None:
        from ..embedded_kafka import EmbeddedKafka

        cluster = EmbeddedKafka(f"endurance-{os.getpid()}", nodes=3)
        say("starting a 3-node Kafka cluster")
        conn = KafkaConnection.create(cluster.start(), {})
    conf, kafka = dict(conn.client_conf), conn.query_options
    rf = 3 if cluster or ns.replication == 3 else ns.replication
    src, out = f"endur-in-{uuid.uuid4().hex[:8]}", f"endur-out-{uuid.uuid4().hex[:8]}"
    cfg = {"min.insync.replicas": "2"} if rf == 3 else {}
    for t in (src, out):
        kafka_admin.create_topic(conf, t, ns.partitions, rf, cfg)
    prefix = f"endur-{uuid.uuid4().hex[:6]}"
    if ns.pyspark_home:  # before the JVM starts: a JVM's SPARK_HOME is fixed for its life
        from ..pyspark_home import build

        os.environ["SPARK_HOME"] = str(build(progress=lambda m: say("  " + m)))
    workdir = Path(tempfile.mkdtemp(prefix="txkafka-endurance-"))
    ck = workdir / "ck"
    spark = spark_session(False, ns.master, {"spark.sql.shuffle.partitions": str(ns.partitions)})
    jvm = spark_jvm_pid(spark)
    q = (spark.readStream.format("txkafka").options(**kafka)
         .option("subscribe", src).option("startingOffsets", "earliest")
         .options(**TXKAFKA_READ_OPTIONS).load()
         .selectExpr("key", "value").writeStream.format("txkafka")
         .options(**kafka).option("topic", out)
         .option("transactionalIdPrefix", prefix)
         .options(**({"producer": ns.producer} if ns.producer else {}))
         .option("checkpointLocation", str(ck))
         .trigger(processingTime=f"{ns.trigger_s} seconds").start())

    stop = threading.Event()
    sent = [0]

    def feed() -> None:
        p = Producer({**conf, "linger.ms": 5, "acks": "all",
                      "enable.idempotence": True, "logger": _quiet})
        t0 = time.monotonic()
        while not stop.is_set():
            due = t0 + sent[0] / ns.rate
            now = time.monotonic()
            if due > now:
                time.sleep(min(due - now, 0.01))
                continue
            p.produce(src, repr(time.time()).encode(), b"%d" % sent[0])
            p.poll(0)
            sent[0] += 1
        if p.flush(60):
            raise RuntimeError("the feeder could not deliver its last records")

    seconds = ns.minutes * 60.0
    window = min(WINDOW_S, seconds / 6)
    output = _Output(conf, out, ns.partitions, window)
    txns = TransactionClient(conf, timeout=30)
    heap = _HeapFloor(spark)
    samples: list[dict[str, float]] = []
    feeder = threading.Thread(target=feed, name="endurance-feeder", daemon=True)
    feed_started = time.time()
    feeder.start()
    try:
        # The start-up: the query's first batches (planner and sink processes, producers, the
        # coordinators) while the feed runs. The hour starts once the output is within two
        # triggers of the input.
        lag_ok = ns.rate * (2 * ns.trigger_s + 1)
        while not (output.received and output.received >= sent[0] - lag_ok):
            output.poll(0.2)
            if q.exception() is not None or not q.isActive:
                raise RuntimeError(f"the query stopped while starting: {q.exception()}")
            if time.time() - feed_started > STARTUP_LIMIT_S:
                raise RuntimeError(f"the stream did not catch up with its input within "
                                   f"{STARTUP_LIMIT_S:.0f} s ({output.received:,} of "
                                   f"{sent[0]:,} records visible)")
        started = time.time()
        output.measured_from = started
        output.last_window = max(0, int(-(-seconds // window)) - 1)
        say(f"caught up after {started - feed_started:.0f} s of start-up; the measured "
            f"{ns.minutes:g} min start now")
        next_sample = started
        while time.time() - started < seconds:
            output.poll(0.2)
            if q.exception() is not None or not q.isActive:
                raise RuntimeError(f"the query stopped after {time.time() - started:.0f} s: "
                                   f"{q.exception()}")
            if time.time() >= next_sample:
                samples.append(_sample(started, jvm, ck, txns, prefix))
                low = heap.take()
                if low is not None:
                    samples[-1]["jvm_heap_floor_mb"] = low
                next_sample += ns.sample_s
                s = samples[-1]
                say(f"  {s['t']:6.0f} s: {sent[0]:,} sent, {output.received:,} received, "
                    f"JVM {s['jvm_rss_mb']:.0f} MB / {s['jvm_threads']:.0f} threads / "
                    f"{s['jvm_fds']:.0f} files, Python {s['py_rss_mb']:.0f} MB in "
                    f"{s['py_processes']:.0f}, commit log {s['commit_log_files']:.0f} files, "
                    f"{s['txn_ids']:.0f} transactional ids")
        ended = time.time()
        stop.set()
        feeder.join(90)
        deadline = time.monotonic() + 120 + 4 * ns.trigger_s
        while output.received + output.duplicates < sent[0] and time.monotonic() < deadline:
            output.poll(0.5)
        output.poll(2.0)  # anything after the last expected record would be a duplicate
    finally:
        stop.set()
        heap.stop.set()
        _stop_between_batches(q)
        spark.stop()
        output.c.close()
        txns.close()
        shutil.rmtree(workdir, ignore_errors=True)
        if cluster is not None and not ns.keep_broker:
            cluster.destroy()
    missing = output.missing(sent[0])
    result = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "setup": {"minutes": ns.minutes, "rate": ns.rate, "trigger_s": ns.trigger_s,
                  "partitions": ns.partitions, "replication": rf, "master": ns.master,
                  "sample_s": ns.sample_s, "pyspark_home": ns.pyspark_home,
                  "producer": ns.producer or "the sink's default",
                  "cluster": "3-node, started here" if cluster else "given"},
        "records": {"sent": sent[0], "received": output.received,
                    "duplicates": output.duplicates, "missing": missing},
        "slopes": slopes(samples, warmup_s=min(300.0, seconds / 6)),
        "startup": {"seconds": round(started - feed_started, 1), "records": output.startup.n,
                    "p99": round(output.startup.percentile(0.99), 3) if output.startup.n else None,
                    "max": round(output.startup.max, 3)},
        "visibility": visibility_windows(output.windows, window, ended - started),
        "samples": samples,
    }
    result["ok"] = bool(sent[0] and not output.duplicates and not missing and samples)
    return result


def _sample(started: float, jvm: int, ck: Path, txns, prefix: str) -> dict[str, float]:
    s: dict[str, float] = {"t": round(time.time() - started, 1)}
    j = process_meter(jvm)
    s.update({"jvm_rss_mb": j.get("rss_mb", 0.0), "jvm_fds": j.get("fds", 0),
              "jvm_threads": j.get("threads", 0)})
    py = [m for m in map(process_meter, python_processes(jvm)) if m]
    s.update({"py_rss_mb": sum(m["rss_mb"] for m in py), "py_fds": sum(m["fds"] for m in py),
              "py_threads": sum(m["threads"] for m in py), "py_processes": len(py)})
    s["driver_py_rss_mb"] = process_meter(os.getpid()).get("rss_mb", 0.0)
    from ..connector.sink.commit_log import SINK_DIR

    files, size = tree_size(ck / SINK_DIR)
    s["commit_log_files"], s["commit_log_kb"] = files, round(size / 1024, 1)
    s["checkpoint_files"] = tree_size(ck)[0]
    s["txn_ids"] = len({t.transactional_id for t in txns.list_transactions(prefix=prefix)})
    return s


# ----------------------------------------------------------------------------- report

def report_markdown(r: dict[str, Any]) -> str:
    rec = r["records"]
    lines = [f"Endurance: {r['setup']['minutes']:g} min at {r['setup']['rate']:,} rows/s, "
             f"{r['setup']['trigger_s']} s trigger, {r['setup']['partitions']} partitions, "
             f"producer {r['setup'].get('producer', 'librdkafka')}: "
             f"{rec['sent']:,} sent, {rec['received']:,} received once, "
             f"{rec['duplicates']} duplicates, {rec['missing']} missing", "",
             "| resource | after warm-up | at the end | slope per hour | relative |",
             "|---|---|---|---|---|"]
    for key, v in r["slopes"].items():
        label, unit = SERIES[key]
        lines.append(f"| {label} | {v['first']:g} {unit} | {v['last']:g} {unit} | "
                     f"{v['per_hour']:+g} {unit} | {100 * v['relative_per_hour']:+.1f} % |")
    st = r.get("startup")
    if st:
        lines += ["", f"Start-up before the measured run: {st['seconds']:g} s until the output "
                  f"was within two triggers of the input ({st['records']:,} records sent "
                  f"meanwhile, max delay {st['max']:.2f} s)."]
    lines += ["", "| window | records | p50 | p99 | max |", "|---|---|---|---|---|"]
    for w in r["visibility"]:
        lines.append(f"| {w['from_s'] / 60:.0f}-{w['to_s'] / 60:.0f} min | {w['records']:,} | "
                     f"{w['p50']:.2f} s | {w['p99']:.2f} s | {w['max']:.2f} s |")
    return "\n".join(lines)


def chart(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [("memory (MB)", ["jvm_rss_mb", "jvm_heap_floor_mb", "py_rss_mb",
                               "driver_py_rss_mb"]),
              ("open files and threads", ["jvm_fds", "jvm_threads", "py_fds", "py_threads"]),
              ("checkpoint and brokers", ["commit_log_files", "checkpoint_files", "txn_ids"])]
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    minutes = [s["t"] / 60 for s in r["samples"]]
    for ax, (title, keys) in zip(axes, groups):
        for key in keys:
            ax.plot(minutes, [s.get(key, 0) for s in r["samples"]], label=SERIES[key][0])
        ax.set_title(title)
        ax.set_xlabel("minutes")
        ax.legend(fontsize=7)
    vis = r["visibility"]
    ax = axes[3]
    mids = [(w["from_s"] + w["to_s"]) / 120 for w in vis]
    ax.plot(mids, [w["p99"] for w in vis], "o-", label="p99")
    ax.plot(mids, [w["p50"] for w in vis], "o-", label="p50")
    ax.set_title("visibility delay per window (s)")
    ax.set_xlabel("minutes")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def cmd_endurance(ns: argparse.Namespace) -> int:
    out = Path(ns.out)
    if ns.report:
        print(report_markdown(read_result(ns.report)))
        return 0
    require_charts()
    r = run(ns)
    out.mkdir(parents=True, exist_ok=True)
    (out / "endurance.json").write_text(json.dumps(r, indent=1))
    chart(r, out / "endurance.png")
    print(report_markdown(r))
    print(f"\nwrote {out / 'endurance.json'} and {out / 'endurance.png'}")
    if not r["ok"]:
        print("FAILED: the stream did not deliver every record exactly once", file=sys.stderr)
        return 1
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("bench-endurance",
                       help="benchmark: one exactly-once stream for an hour; resource slopes")
    add_kafka_options(p, required=False, cluster="run on this Kafka cluster (default: a 3-node "
                      "one started for the run)")
    p.add_argument("--replication", type=int, default=1, metavar="N",
                   help="with --bootstrap-servers: the topics' replication factor; a cluster "
                        "started here takes 3")
    p.add_argument("--minutes", type=float, default=60.0, help="how long the stream runs")
    p.add_argument("--rate", type=int, default=3000, metavar="N", help="input records per second")
    p.add_argument("--trigger-s", type=int, default=2, metavar="SECONDS",
                   help="the query's processing-time trigger")
    p.add_argument("--partitions", type=int, default=6, metavar="N",
                   help="input and output partitions, and shuffle partitions")
    p.add_argument("--sample-s", type=float, default=30.0, metavar="SECONDS",
                   help="how often the resources are sampled")
    p.add_argument("--master", default="local[2]", help="the Spark master")
    p.add_argument("--producer", choices=("auto", "librdkafka", "txkafka"),
                   help="the sink's producer option (default: the sink's default)")
    p.add_argument("--pyspark-home", action="store_true",
                   help="run Spark from the Spark home txkafka pyspark-home "
                   "builds (bytecode imports)")
    p.add_argument("--keep-broker", action="store_true",
                   help="leave the cluster started for the run running")
    p.add_argument("--out", default="results/endurance", metavar="DIR",
                   help="folder for endurance.json and its chart")
    p.add_argument("--report", metavar="FILE",
                   help="print the tables of an existing endurance.json, run nothing")
    p.set_defaults(func=cmd_endurance)
