"""Test-side Kafka helpers: a cluster as the tests see it, on txkafka.kafka_admin's topics,
producers and exhaustive read_committed reads, plus the transaction watching only tests need.
"""

from __future__ import annotations

import struct
import time
import uuid
from dataclasses import dataclass
from typing import Iterable, Sequence

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from txkafka import kafka_admin
from txkafka.connector.client.connection import BrokerConnection, SecurityConfig, split_host_port
from txkafka.connector.client.protocol import Writer
from txkafka.connector.client.transactions import TransactionClient
from txkafka.kafka_admin import QUIET  # noqa: F401 - imported from here by chaos/feeder.py


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class KafkaTarget:
    """A running cluster as the tests see it: bootstrap servers plus helpers."""

    def __init__(self, bootstrap: str, kind: str, cluster=None, extra_conf: dict | None = None):
        self.bootstrap = bootstrap
        self.kind = kind
        self.cluster = cluster
        self.extra_conf = dict(extra_conf or {})

    def __repr__(self) -> str:
        return f"KafkaTarget({self.kind}, {self.bootstrap})"

    @property
    def conf(self) -> dict:
        return {"bootstrap.servers": self.bootstrap, **self.extra_conf}

    @property
    def replication_factor(self) -> int:
        return 3 if self.cluster is not None and len(self.cluster.node_infos) == 3 else 1

    def admin(self) -> AdminClient:
        return kafka_admin.admin(self.conf)

    def create_topic(self, name: str | None = None, partitions: int = 1,
                     config: dict[str, str] | None = None) -> str:
        return kafka_admin.create_topic(self.conf, name or unique("t"), partitions,
                                        self.replication_factor, config)

    def wait_topic(self, name: str, partitions: int, timeout: float = 30) -> None:
        kafka_admin.wait_topic(self.conf, name, partitions, timeout)

    def producer(self, transactional_id: str | None = None, **conf) -> Producer:
        return kafka_admin.producer(self.conf, transactional_id, **conf)

    def produce(self, topic: str, records: Iterable[tuple], *, transactional: bool = False,
                commit: bool = True, headers: Sequence | None = None) -> int:
        """Produce (key, value[, partition[, timestamp_ms]]) tuples; transactional on request."""
        n = kafka_admin.produce(self.conf, topic, records, transactional=transactional,
                                commit=commit, headers=headers)
        if transactional:
            # Markers follow commit/abort: a record produced before them would land in front.
            self.wait_decided_markers(topic)
        return n

    def wait_decided_markers(self, topic: str, settle_s: float = 10.0) -> None:
        """Until no decided transaction on ``topic`` still waits for its markers.

        A commit or abort returns once the coordinator logged PrepareCommit/PrepareAbort; the
        markers follow. A read right then stops at the last stable offset before them and would
        report committed records as missing, and a record produced then lands before the marker
        (shifting the offsets a test lays out). Bounded: a transaction stuck in Prepare* (a
        partition leader down) is the test's to diagnose.
        """
        deadline = time.monotonic() + settle_s
        try:
            with TransactionClient(self.conf, timeout=settle_s) as tc:
                while True:
                    deciding = tc.list_transactions(states=["PrepareCommit", "PrepareAbort"])
                    if not deciding:
                        return
                    descs = tc.describe(t.transactional_id for t in deciding)
                    if not any(d.state.startswith("Prepare") and topic in d.partitions
                               for d in descs.values()):
                        return
                    if time.monotonic() > deadline:
                        return
                    time.sleep(0.02)
        except Exception:  # noqa: BLE001 - only a wait: the read itself reports what it finds
            return

    def partitions(self, topic: str) -> list[int]:
        return kafka_admin.partitions(self.conf, topic)

    def set_client_quota(self, client_id: str, **quotas: float) -> None:
        """Set quotas (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``)
        of one client id, as ``kafka-configs --alter --entity-type clients`` does: an
        AlterClientQuotas request (API 49 v1; confluent-kafka's admin client has none)."""

        def op(w: Writer, kv: tuple[str, float]) -> None:
            w.string(kv[0]).parts.append(struct.pack(">d", kv[1]))
            w.boolean(False).tags()

        def entry(w: Writer, _: None) -> None:
            w.array([client_id], lambda ww, c: ww.string("client-id").string(c).tags())
            w.array(sorted(quotas.items()), op).tags()

        body = Writer(True).array([None], entry).boolean(False).tags().build()
        host, port = split_host_port(self.bootstrap.split(",")[0])
        conn = BrokerConnection(host, port, SecurityConfig.from_kafka_config(self.conf))
        try:
            r = conn.connect().request(49, 1, body, flexible=True)
            r.int32()

            def answer(rr) -> tuple[int, str | None]:
                code, msg = rr.int16(), rr.string()
                rr.array(lambda e: (e.string(), e.string(), e.tags()))
                rr.tags()
                return code, msg

            errors = [a for a in r.array(answer) if a[0]]
        finally:
            conn.close()
        assert not errors, f"AlterClientQuotas for client id {client_id!r}: {errors}"

    def read_all(self, topic: str, *, isolation: str = "read_committed",
                 timeout: float = 60.0) -> list[Record]:
        """Every record of every partition from the start to the current end, in offset order."""
        if isolation == "read_committed":
            self.wait_decided_markers(topic)
        out = [Record(m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1],
                      tuple(m.headers() or ()))
               for m in kafka_admin.scan_topic(self.conf, topic, timeout, isolation)]
        out.sort(key=lambda r: (r.partition, r.offset))
        return out

    def read_committed_count(self, topic: str, n: int, timeout: float = 60.0) -> list[Record]:
        """``read_all`` once ``n`` records are visible to read_committed (the markers of a commit
        can lag its EndTxn answer on a busy machine beyond ``wait_decided_markers``' bound);
        fails with what read_uncommitted holds when they never are."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.read_all(topic)
            if len(got) >= n or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if len(got) != n:
            raw = len(self.read_all(topic, isolation="read_uncommitted"))
            raise AssertionError(f"{topic}: {len(got)} records visible to read_committed after "
                                 f"{timeout:.0f}s, {n} expected; read_uncommitted sees {raw}")
        return got

    def open_transactions(self, prefix: str, settle_s: float = 15.0) -> list:
        """Transactions of ``prefix`` that a read_committed reader would wait for.

        PrepareCommit/PrepareAbort last only while the coordinator writes markers: wait for them
        to finish, so what remains is really open (Ongoing) or stuck.
        """
        deadline = time.monotonic() + settle_s
        with TransactionClient(self.conf) as tc:
            while True:
                listed = tc.list_transactions(prefix=prefix)
                active = [t for t in listed if t.state not in ("Empty", "CompleteCommit",
                                                               "CompleteAbort", "Dead")]
                if not any(t.state.startswith("Prepare") for t in active):
                    return active
                if time.monotonic() > deadline:
                    return active
                time.sleep(0.2)

    def end_offsets(self, topic: str) -> dict[int, int]:
        """High watermarks (open transactions' records included)."""
        return kafka_admin.end_offsets(self.conf, topic, "read_uncommitted")


@dataclass
class ObservedTransaction:
    """One transaction (id, producer id, epoch) as a watcher saw it; times in wall-clock ms."""

    transactional_id: str
    producer_id: int
    epoch: int
    start_ms: int            # the coordinator's start time (first partition added)
    first_seen_ms: int
    last_open_ms: int        # the last poll that saw it Ongoing (never seen so: its start)
    closed_ms: int | None = None  # the first poll that no longer saw it Ongoing
    # Opened and aborted between two polls: found in its aborted state, never seen Ongoing.
    between_polls: bool = False

    @property
    def key(self) -> tuple[str, int, int]:
        return self.transactional_id, self.producer_id, self.epoch

    @property
    def end_ms(self) -> int:
        """An upper bound of when it ended (still open at the last poll: that poll's time)."""
        return self.closed_ms if self.closed_ms is not None else self.last_open_ms


class TransactionWatcher:
    """Polls the transactions whose ids start with what ``prefix()`` returns (None until known)
    and records each one's open interval, in a thread, until ``stop()``.

    A transaction opened and aborted between two polls (a late attempt's, a sweep ended it
    quickly; polls are slow on a loaded machine) is found in its aborted state, which keeps the
    coordinator's start time, and recorded as ended by the poll that found it (if it started
    after the watcher did: the prefix may hold earlier tests' transactions)."""

    _ABORTED = ("PrepareAbort", "CompleteAbort")

    def __init__(self, kafka: KafkaTarget, prefix, interval_s: float = 0.25) -> None:
        import threading

        self.kafka = kafka
        self.prefix = prefix
        self.interval_s = interval_s
        self.seen: list[ObservedTransaction] = []  # one per open interval, in order seen
        self._open: dict[tuple[str, int, int], ObservedTransaction] = {}
        self._recorded: set[tuple[str, int]] = set()  # (id, the coordinator's start time)
        self.started_ms = int(time.time() * 1000)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="txn-watcher")

    def __enter__(self) -> "TransactionWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        with TransactionClient(self.kafka.conf, timeout=10) as tc:
            while not self._stop.is_set():
                try:
                    self._poll(tc)
                except Exception as e:  # noqa: BLE001 - recorded; a test asserts on them
                    self.errors.append(f"{type(e).__name__}: {e}")
                self._stop.wait(self.interval_s)

    def _poll(self, tc: TransactionClient) -> None:
        prefix = self.prefix()
        if prefix is None:
            return
        listed = tc.list_transactions(prefix=prefix, states=["Ongoing", *self._ABORTED])
        descs = tc.describe(t.transactional_id for t in listed) if listed else {}
        now = int(time.time() * 1000)
        open_now = set()
        for d in descs.values():
            key = (d.transactional_id, d.producer_id, d.producer_epoch)
            if d.state in self._ABORTED:
                if ((d.transactional_id, d.start_time_ms) not in self._recorded
                        and d.start_time_ms >= self.started_ms):
                    self._recorded.add((d.transactional_id, d.start_time_ms))
                    self.seen.append(ObservedTransaction(*key, d.start_time_ms, now,
                                                         d.start_time_ms, now, True))
                continue
            if d.state != "Ongoing":
                continue
            open_now.add(key)
            self._recorded.add((d.transactional_id, d.start_time_ms))
            seen = self._open.get(key)
            if seen is None:
                # (a key seen again after it closed is a new transaction of the same producer)
                seen = self._open[key] = ObservedTransaction(*key, d.start_time_ms, now, now)
                self.seen.append(seen)
            seen.last_open_ms = now
        for key in [k for k in self._open if k not in open_now]:
            self._open.pop(key).closed_ms = now
