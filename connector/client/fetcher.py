"""Executor side, fast path: read an offset range with Fetch requests of txkafka's own, decoded
into Arrow by :mod:`record_batch_decoder`.

Why: through librdkafka most of a record's CPU in the Python worker goes into creating a
``Message`` per record; decoded from the Fetch response it costs a fraction of that
(docs/benchmarks.md).
The happy path only lives here: Fetch from the leader, leader moves retried (for ``_RETRY_BUDGET_S``
at least: a dead leader is replaced once the controller fences it), leaders looked up at the
bootstrap servers or any broker seen since (one may be down for a restart). A thread fetches and
decodes up to two responses ahead of what Spark takes (socket waits and numpy release the GIL), so
the broker's answer is coming while the previous one goes to Spark. Anything else (offset
out of range, a deleted topic, authorization, no progress) hands the rest of the range to the
librdkafka reader (connector/source/range_reader.py), which owns the diagnosis: data-loss rules,
stall time-outs and error translation stay in one place.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterator

from .connection import BrokerConnection, SecurityConfig, split_host_port
from .metadata import request_metadata
from ..errors import KafkaAuthenticationError, KafkaProtocolError
from .error_codes import (
    FENCED_LEADER_EPOCH,
    KAFKA_STORAGE_ERROR,
    LEADER_NOT_AVAILABLE,
    NOT_LEADER_OR_FOLLOWER,
    REPLICA_NOT_AVAILABLE,
    UNKNOWN_LEADER_EPOCH,
    error_name,
)
from .protocol import ProtocolError, Writer
from .record_batch_decoder import DecodedRecords, decode

log = logging.getLogger("txkafka.reader")

FETCH = 1
FETCH_VERSION = 11  # v11: KIP-320 leader epochs, KIP-392 rack id; non-flexible, topic names

# Partition errors after which the leader is looked up again and the fetch retried.
_LEADER_MOVED = {LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE,
                 KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH}
_RETRIES = 8
_BACKOFF_S = 0.1
# A leader that dies is replaced once the controller fences it (broker.session.timeout.ms, 9 s by
# default): retries go on at least this long before the range is handed over.
_RETRY_BUDGET_S = 15.0


@dataclass
class _Response:
    records: DecodedRecords | None  # None: hand the range over at ``position``
    position: int
    reason: str = ""


class _Links:
    """Per worker process: connections by broker and client config, and leaders found.

    Keyed by the client config without ``group.id`` (each query generates its own; the
    connection only depends on the broker and the security settings). At most ``MAX_CONNS``
    are kept, the least recently used closed first. One :class:`SecurityConfig` per config, so
    its connections share one OAUTHBEARER token source (one token fetched, not one each).
    """

    MAX_CONNS = 32

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conns: OrderedDict[tuple, BrokerConnection] = OrderedDict()
        self.security: dict[tuple, SecurityConfig] = {}
        self.leaders: dict[tuple, tuple[str, int]] = {}
        # Brokers of Metadata answers, per client config: asked for leaders when the bootstrap
        # servers do not answer (a rolling restart takes each of them down in turn).
        self.seen: dict[tuple, dict[tuple[str, int], None]] = {}

    def connection(self, config: tuple, host: str, port: int) -> BrokerConnection:
        key = (config, host, port)
        evicted = []
        with self.lock:
            conn = self.conns.get(key)
            if conn is None or conn.closed:
                conf = dict(config)
                security = self.security.get(config)
                if security is None:
                    security = self.security[config] = SecurityConfig.from_kafka_config(conf)
                conn = BrokerConnection(host, port, security,
                                        client_id=conf.get("client.id", "txkafka-reader"))
                self.conns[key] = conn
            self.conns.move_to_end(key)
            while len(self.conns) > self.MAX_CONNS:
                evicted.append(self.conns.popitem(last=False)[1])
        for old in evicted:
            old.close()
        return conn

    def drop(self, config: tuple, conn: BrokerConnection) -> None:
        """Forget a connection whose request failed, if the failure broke it
        (:attr:`BrokerConnection.broken`); one whose request only waited for it behind another
        range's slow one stays shared."""
        if not conn.broken:
            return
        key = (config, conn.host, conn.port)
        with self.lock:
            if self.conns.get(key) is conn:
                del self.conns[key]
        conn.close()

    def close_all(self) -> None:
        with self.lock:
            conns = list(self.conns.values())
            self.conns.clear()
            self.security.clear()
            self.leaders.clear()
            self.seen.clear()
        for c in conns:
            c.close()


LINKS = _Links()
atexit.register(LINKS.close_all)


class WireRange:
    """Reads [start, end) of one partition; ``handoff`` is where the librdkafka reader takes
    over (None when the range was read to its end)."""

    def __init__(self, topic: str, partition: int, start: int, end: int,
                 config: tuple[tuple[str, str], ...], include_headers: bool = False,
                 links: _Links = LINKS) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        conf = dict(config)
        conf.pop("group.id", None)  # per query; connections are shared by the process's queries
        self.config = tuple(sorted(conf.items()))
        self.conf = conf
        self.read_committed = conf.get("isolation.level", "read_committed") == "read_committed"
        self.max_wait_ms = int(conf.get("fetch.wait.max.ms", "100"))
        self.min_bytes = int(conf.get("fetch.min.bytes", "1"))
        self.partition_bytes = int(conf.get("max.partition.fetch.bytes")
                                   or conf.get("fetch.message.max.bytes") or 8 << 20)
        self.total_bytes = max(int(conf.get("fetch.max.bytes", 50 << 20)), self.partition_bytes)
        self.include_headers = include_headers
        self.links = links
        self.handoff: int | None = None
        self.handoff_reason = ""

    def _where(self) -> str:
        return f"topic {self.topic!r} partition {self.partition}"

    # ---------------------------------------------------------------- metadata

    def _leader(self, refresh: bool) -> tuple[str, int]:
        key = (self.config, self.topic, self.partition)
        if not refresh:
            with self.links.lock:
                hit = self.links.leaders.get(key)
            if hit is not None:
                return hit
        errors = []
        hosts = [split_host_port(s) for s in str(self.conf.get("bootstrap.servers", "")).split(",")
                 if s.strip()]
        with self.links.lock:
            hosts += [a for a in self.links.seen.get(self.config, {}) if a not in hosts]
        for host, port in hosts:
            conn = None
            try:
                conn = self.links.connection(self.config, host, port)
                found = self._metadata(conn.connect())
            except KafkaProtocolError as e:
                if conn is not None:
                    self.links.drop(self.config, conn)
                errors.append(str(e))
                continue
            if found is not None:
                with self.links.lock:
                    self.links.leaders[key] = found
                return found
        raise KafkaProtocolError(f"no leader found for {self._where()}: " + "; ".join(errors))

    def _metadata(self, conn: BrokerConnection) -> tuple[str, int] | None:
        md = request_metadata(conn, [self.topic])
        with self.links.lock:
            self.links.seen.setdefault(self.config, {}).update(dict.fromkeys(md.brokers.values()))
        node = md.leaders.get((self.topic, self.partition))
        return md.brokers.get(node) if node is not None else None

    # ------------------------------------------------------------------- fetch

    def _request(self, offset: int) -> bytes:
        w = Writer(False)
        w.int32(-1).int32(self.max_wait_ms).int32(self.min_bytes).int32(self.total_bytes)
        w.int8(1 if self.read_committed else 0).int32(0).int32(-1)  # no fetch session
        w.int32(1).string(self.topic).int32(1)
        w.int32(self.partition).int32(-1).int64(offset).int64(-1).int32(self.partition_bytes)
        w.int32(0).string("")  # nothing forgotten; no rack: the leader serves
        return w.build()

    def _fetch(self, conn: BrokerConnection, offset: int
               ) -> tuple[int, list[tuple[int, int]], memoryview | None] | None:
        """The partition's error code, aborted transactions and records; None when the broker
        throttled the request (a quota): it then answers at once with no partitions at all, and
        reads this connection again once the throttle time has passed."""
        r = conn.request(FETCH, FETCH_VERSION, self._request(offset), flexible=False)
        throttle_ms = r.int32()
        conn.throttle(throttle_ms)
        top = r.int16()
        r.int32()  # session
        if top:
            return top, [], None
        topics = r.int32()
        if topics <= 0 and throttle_ms > 0:
            return None
        err, aborted, records = 0, [], None
        for _ in range(topics):
            r.string()
            for _ in range(r.int32()):
                r.int32()
                err = r.int16()
                r.int64()
                r.int64()
                r.int64()
                n = r.int32()
                aborted = [(r.int64(), r.int64()) for _ in range(max(n, 0))]
                r.int32()  # preferred read replica: none asked for (no rack)
                size = r.int32()
                records = r.view(size) if size > 0 else None
        return err, aborted, records

    def responses(self, stop: threading.Event) -> Iterator[_Response]:
        """Decoded responses until the range ends or is handed over (the last one says where)."""
        pos = self.start
        retries = 0
        refresh = False
        give_up_at = 0.0  # once retries ran out: retried on until then (set at the first retry)

        def retry() -> bool:
            nonlocal retries, refresh, give_up_at
            if retries == 0:
                give_up_at = time.monotonic() + _RETRY_BUDGET_S
            if retries >= _RETRIES and time.monotonic() >= give_up_at:
                return False
            retries += 1
            refresh = True
            time.sleep(min(_BACKOFF_S * retries, 1.0))
            return True

        while pos < self.end and not stop.is_set():
            try:
                host, port = self._leader(refresh)
                conn = self.links.connection(self.config, host, port).connect()
                if conn.version_for(FETCH, 4, FETCH_VERSION) != FETCH_VERSION:
                    yield _Response(None, pos, "the broker does not speak Fetch v11 (Kafka < 2.3)")
                    return
                answer = self._fetch(conn, pos)
                if answer is None:
                    continue  # throttled: asked again once the connection's throttle ends
                err, aborted, records = answer
            except ProtocolError as e:
                yield _Response(None, pos, f"a Fetch response did not parse: {e}")
                return
            except KafkaProtocolError as e:
                if isinstance(e, KafkaAuthenticationError) or not retry():
                    yield _Response(None, pos, str(e))
                    return
                continue
            if err in _LEADER_MOVED and retry():
                continue
            if err:
                yield _Response(None, pos, f"the broker answered {error_name(err)}")
                return
            try:
                decoded = decode(records, pos, self.end, aborted=aborted,
                                 read_committed=self.read_committed,
                                 include_headers=self.include_headers)
            except KafkaProtocolError as e:
                yield _Response(None, pos, str(e))
                return
            if decoded.next_offset <= pos:
                # Nothing at pos although the range was planned to it: librdkafka waits for it
                # and diagnoses what happened (data loss rules, kafkaConsumer.pollTimeoutMs).
                yield _Response(None, pos, "no records where the range expects them")
                return
            retries = 0
            refresh = False
            pos = decoded.next_offset
            yield _Response(decoded, pos)


_DONE = object()


def read_range(wr: WireRange) -> Iterator[DecodedRecords]:
    """The range's decoded records, fetched up to two responses ahead on a thread; sets
    ``wr.handoff`` when the rest of the range is left to the librdkafka reader."""
    ahead: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()
    failure: list[BaseException] = []

    def hand_over(item: object) -> bool:
        """Queue ``item`` unless the reader stopped (it then takes nothing more)."""
        while not stop.is_set():
            try:
                ahead.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def fetch_loop() -> None:
        try:
            for resp in wr.responses(stop):
                if not hand_over(resp):
                    return
        except BaseException as e:  # noqa: BLE001 - re-raised in the reading thread
            failure.append(e)
        finally:
            hand_over(_DONE)

    thread = threading.Thread(target=fetch_loop, name=f"txkafka-fetch-{wr.topic}-{wr.partition}",
                              daemon=True)
    thread.start()
    try:
        while True:
            item = ahead.get()
            if item is _DONE:
                break
            if item.records is None:
                wr.handoff, wr.handoff_reason = item.position, item.reason
                break
            yield item.records
        if failure:
            raise failure[0]
    finally:
        stop.set()
        thread.join(timeout=5)


def handoff_log(wr: WireRange) -> None:
    log.info("reading %s: txkafka's fetch hands offsets [%d, %d) to librdkafka (%s)",
             wr._where(), wr.handoff, wr.end, wr.handoff_reason)

