"""A query listener that shows operators how far a txkafka query is behind and what its sink did.

    from txkafka.monitoring import TxKafkaListener
    listener = TxKafkaListener(checkpoints=["s3://bucket/ck/orders"])
    spark.streams.addListener(listener)

Why a listener: PySpark's Python data sources cannot put metrics into a query's progress (they do
not implement ReportsSourceMetrics), but the progress already carries each source's ``endOffset``
and the ``latestOffset`` txkafka's reader reports. The listener turns them into Spark's built-in
Kafka figures (connector/source/lag.py) on each progress event: nothing per record, nothing in a
batch's path. The sink's figures come from the sink's own records under the query's checkpoint
(connector/sink/figures.py), which a progress event does not name: the user gives the
checkpoint, and the listener matches it to the query by the id Spark keeps in its ``metadata``.

It runs where the user's Python runs (the driver, or a Spark Connect client), keeps the newest
figures per query for code to read (``figures``), logs a line per progress, and exports them in
Prometheus' text format on request (the optional ``prometheus-client``: ``txkafka[prometheus]``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from pyspark.sql.streaming import StreamingQueryListener

from .connector.checkpoint.spark_checkpoint import SparkCheckpoint
from .connector.errors import TxKafkaError
from .connector.secrets_redaction import redact_uri
from .connector.sink.commit_log import SinkCommitLog
from .connector.sink.figures import BatchFigures, FiguresReader
from .connector.source.lag import Lag, progress_lag

log = logging.getLogger(__name__)

# Counters of the sink, per query: BatchFigures field -> Prometheus metric (without _total).
_COUNTERS = {
    "committed": ("txkafka_sink_transactions_committed", "transactions committed"),
    "rolled_forward": ("txkafka_sink_transactions_rolled_forward",
                       "decided transactions committed by a later run (recovery)"),
    "lost": ("txkafka_sink_transactions_lost",
             "decided transactions the broker aborted before their commit landed"),
    "rewritten": ("txkafka_sink_transactions_rewritten",
                  "transactions that re-wrote a lost round's task partitions"),
    "aborted": ("txkafka_sink_transactions_aborted",
                "transactions the sink aborted (failed batches, re-runs, orphans)"),
    "late_swept": ("txkafka_sink_late_transactions_swept",
                   "late task attempts' transactions ended by the follow-up sweeps"),
    "records": ("txkafka_sink_records", "records committed"),
    "bytes": ("txkafka_sink_bytes", "key and value bytes committed"),
}


@dataclass
class QueryFigures:
    """The newest figures of one query, as the listener last saw them."""

    query_id: str
    name: str | None = None
    run_id: str | None = None
    batch_id: int | None = None
    progress_time: str | None = None
    lag: Lag | None = None                 # every txkafka source of the query together
    checkpoint: str | None = None          # given by the user; None: no sink figures
    sink_batches: list[BatchFigures] = field(default_factory=list)  # newest last
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_COUNTERS, 0))
    lag_history: list[int] = field(default_factory=list)  # records behind, newest last
    active: bool = True

    @property
    def label(self) -> str:
        return self.name or self.query_id

    def to_json(self) -> dict[str, Any]:
        return {"query_id": self.query_id, "name": self.name, "run_id": self.run_id,
                "batch_id": self.batch_id, "progress_time": self.progress_time,
                "active": self.active,
                "lag": self.lag.to_json() if self.lag is not None else None,
                "lag_history": list(self.lag_history),
                "checkpoint": redact_uri(self.checkpoint) if self.checkpoint else None,
                "sink_batches": [b.to_json() for b in self.sink_batches],
                "sink_totals": dict(self.totals)}


class TxKafkaListener(StreamingQueryListener):
    """Lag and sink figures of txkafka queries, from their progress events.

    ``checkpoints``: the checkpointLocation of each query whose sink figures to read (more with
    ``add_checkpoint``); the lag needs none. ``sink_batches``: how many of the sink's newest
    batches to keep per query. ``history``: how many progress events' lag to keep per query.
    """

    def __init__(self, checkpoints: Iterable[str] = (), *, sink_batches: int = 5,
                 history: int = 20, log_level: int = logging.INFO) -> None:
        super().__init__()
        self.sink_batches = sink_batches
        self.history = history
        self.log_level = log_level
        self._lock = threading.Lock()
        self._queries: dict[str, QueryFigures] = {}
        self._pending: list[str] = []            # checkpoints whose query id is not known yet
        self._by_query: dict[str, str] = {}      # query id -> checkpoint
        self._readers: dict[str, FiguresReader] = {}
        self._counted: dict[str, set[int]] = {}  # query id -> batches in the totals
        self._registry = None
        self._warned = False
        for ck in checkpoints:
            self.add_checkpoint(ck)

    # ------------------------------------------------------------------ what code reads

    def add_checkpoint(self, checkpoint: str) -> None:
        """Read the sink figures of the query whose checkpointLocation is ``checkpoint`` (matched
        to its query when Spark has written the checkpoint's metadata)."""
        with self._lock:
            if checkpoint not in self._pending and checkpoint not in self._by_query.values():
                self._pending.append(checkpoint)

    def figures(self, query: str) -> QueryFigures | None:
        """The newest figures of one query, by its id or name (None: no event of it yet)."""
        with self._lock:
            return self._queries.get(query) or next(
                (q for q in self._queries.values() if q.name == query), None)

    def queries(self) -> dict[str, QueryFigures]:
        """The newest figures of every query seen, by query id."""
        with self._lock:
            return dict(self._queries)

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {qid: q.to_json() for qid, q in self._queries.items()}

    # ------------------------------------------------------------------ Spark's events

    def onQueryStarted(self, event) -> None:
        with self._lock:
            q = self._query(str(event.id))
            q.name, q.run_id, q.active = event.name, str(event.runId), True

    def onQueryProgress(self, event) -> None:
        try:
            self._progress(event.progress)
        except Exception as e:  # noqa: BLE001 - monitoring must never disturb the query
            (log.debug if self._warned else log.warning)(
                "txkafka listener: cannot read a progress event's figures: %s", e)
            self._warned = True

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        with self._lock:
            q = self._queries.get(str(event.id))
            if q is not None:
                q.active = False
        self._refresh_sink(str(event.id))  # the last batch's outcome, written before the end

    # ------------------------------------------------------------------ internals

    def _query(self, query_id: str) -> QueryFigures:
        q = self._queries.get(query_id)
        if q is None:
            q = self._queries[query_id] = QueryFigures(query_id)
        return q

    def _progress(self, p) -> None:
        lags = [lag for s in (p.sources or [])
                if (lag := progress_lag(s.endOffset, s.latestOffset)) is not None]
        merged: Lag | None = None
        if lags:
            parts: dict = {}
            for lag in lags:
                for tp, n in lag.partitions.items():
                    parts[tp] = max(n, parts.get(tp, 0))  # a topic two sources read
            merged = Lag(parts)
        with self._lock:
            q = self._query(str(p.id))
            q.name, q.run_id = p.name, str(p.runId)
            q.batch_id, q.progress_time = p.batchId, p.timestamp
            if merged is not None:
                q.lag = merged
                q.lag_history = (q.lag_history + [merged.total])[-self.history:]
        self._refresh_sink(str(p.id))
        self._log(q)

    def _checkpoint_of(self, query_id: str) -> str | None:
        with self._lock:
            if query_id not in self._by_query and self._pending:
                for ck in list(self._pending):
                    try:
                        qid = SparkCheckpoint(ck).query_id()
                    except (TxKafkaError, OSError):
                        qid = None
                    if qid is not None:
                        self._pending.remove(ck)
                        self._by_query[qid] = ck
            return self._by_query.get(query_id)

    def _refresh_sink(self, query_id: str) -> None:
        ck = self._checkpoint_of(query_id)
        if ck is None:
            return
        reader = self._readers.get(query_id)
        if reader is None:
            reader = self._readers[query_id] = FiguresReader(SinkCommitLog(ck),
                                                             keep=max(self.sink_batches, 1))
        try:
            newest = reader.newest()
        except (TxKafkaError, OSError) as e:
            log.warning("txkafka listener: cannot read the sink's records under %s: %s",
                        redact_uri(ck), e)
            return
        with self._lock:
            q = self._query(query_id)
            q.checkpoint = ck
            q.sink_batches = newest[-self.sink_batches:]
            counted = self._counted.setdefault(query_id, set())
            for b in newest:
                if b.status in ("complete", "empty") and b.batch_id not in counted:
                    counted.add(b.batch_id)
                    for key in _COUNTERS:
                        # aborts: as the records carry them, so that each counts once
                        q.totals[key] += int(b.carried.get(key, getattr(b, key)) or 0)
            if newest:
                counted.difference_update({b for b in counted if b < newest[0].batch_id})

    def _log(self, q: QueryFigures) -> None:
        if not log.isEnabledFor(self.log_level):
            return
        parts = [f"query {q.label} batch {q.batch_id}"]
        if q.lag is not None:
            parts.append(f"behind latest: {q.lag.total} records (avg {q.lag.avg:.1f}, max "
                         f"{q.lag.max}, min {q.lag.min} offsets per partition)")
        done = [b for b in q.sink_batches if b.status in ("complete", "empty")]
        if done:
            b = done[-1]
            parts.append(f"sink batch {b.batch_id}: {b.committed} transactions committed, "
                         f"{b.records} records, {b.bytes} bytes, commit {b.commit_ms} ms, "
                         f"{b.aborted} aborted, {b.lost} lost")
        log.log(self.log_level, "; ".join(parts))

    # ------------------------------------------------------------------ Prometheus

    def prometheus_registry(self):
        """A prometheus_client registry holding this listener's figures (read when scraped)."""
        if self._registry is None:
            try:
                from prometheus_client import CollectorRegistry
            except ImportError:
                raise ImportError(
                    "the Prometheus export needs the prometheus-client package: pip install "
                    "'txkafka[prometheus]'") from None
            registry = CollectorRegistry(auto_describe=False)
            registry.register(_Collector(self))
            self._registry = registry
        return self._registry

    def prometheus_text(self) -> str:
        """The figures in Prometheus' text exposition format."""
        from prometheus_client import generate_latest

        return generate_latest(self.prometheus_registry()).decode()

    def serve_prometheus(self, port: int, addr: str = "0.0.0.0"):
        """Serve the figures for Prometheus to scrape at ``http://addr:port/metrics`` (a daemon
        thread of prometheus_client); returns its server and thread."""
        from prometheus_client import start_http_server

        return start_http_server(port, addr=addr, registry=self.prometheus_registry())


class _Collector:
    """Reads the listener's newest figures at each scrape (nothing kept twice)."""

    def __init__(self, listener: TxKafkaListener) -> None:
        self.listener = listener

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        queries = list(self.listener.queries().values())
        by_partition = GaugeMetricFamily(
            "txkafka_source_offsets_behind_latest",
            "offsets between the last batch's end and the latest offset, per partition",
            labels=["query", "topic", "partition"])
        summary = {
            "avg": GaugeMetricFamily("txkafka_source_avg_offsets_behind_latest",
                                     "Spark's avgOffsetsBehindLatest: mean over partitions",
                                     labels=["query"]),
            "max": GaugeMetricFamily("txkafka_source_max_offsets_behind_latest",
                                     "Spark's maxOffsetsBehindLatest", labels=["query"]),
            "min": GaugeMetricFamily("txkafka_source_min_offsets_behind_latest",
                                     "Spark's minOffsetsBehindLatest", labels=["query"]),
            "total": GaugeMetricFamily("txkafka_source_records_behind_latest",
                                       "offsets behind latest, every partition together",
                                       labels=["query"]),
        }
        batch = GaugeMetricFamily("txkafka_query_batch_id", "batch id of the newest progress",
                                  labels=["query"])
        last_batch = GaugeMetricFamily("txkafka_sink_last_batch_id",
                                       "newest batch the sink finished", labels=["query"])
        last_time = GaugeMetricFamily("txkafka_sink_last_commit_timestamp_seconds",
                                      "when the sink finished its newest batch (Unix time)",
                                      labels=["query"])
        commit = GaugeMetricFamily("txkafka_sink_commit_seconds",
                                   "decision to last EndTxn answer, newest batch with data",
                                   labels=["query"])
        counters = {k: CounterMetricFamily(name, text, labels=["query"])
                    for k, (name, text) in _COUNTERS.items()}
        for q in queries:
            label = [q.label]
            if q.batch_id is not None:
                batch.add_metric(label, q.batch_id)
            if q.lag is not None:
                for (t, p), n in sorted(q.lag.partitions.items()):
                    by_partition.add_metric([q.label, t, str(p)], n)
                for key, fam in summary.items():
                    fam.add_metric(label, getattr(q.lag, key))
            done = [b for b in q.sink_batches if b.status in ("complete", "empty")]
            if done:
                last_batch.add_metric(label, done[-1].batch_id)
                if done[-1].completed_ms:
                    last_time.add_metric(label, done[-1].completed_ms / 1000.0)
            timed = [b for b in done if b.commit_ms is not None]
            if timed:
                commit.add_metric(label, timed[-1].commit_ms / 1000.0)
            if q.checkpoint is not None:
                for key, fam in counters.items():
                    fam.add_metric(label, q.totals[key])
        yield from (by_partition, *summary.values(), batch, last_batch, last_time, commit,
                    *counters.values())
