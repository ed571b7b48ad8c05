"""A transactional (or idempotent-only) Kafka producer over txkafka's own connections: Arrow columns
in, record batches from :mod:`record_batch_encoder` out, with acks=all and per-partition sequences.

Why: librdkafka costs the Python worker a call per record, and a task's transactional producer is a
new client each time (connections, metadata, FindCoordinator, InitProducerId). Here a worker keeps
one :class:`ClusterLink` per client config across tasks (connections, metadata, coordinators), so a
task's start is one InitProducerId on an open connection, and records are encoded in bulk.

The protocol is the one librdkafka speaks (pre-KIP-890 transactions): InitProducerId (v2-4),
AddPartitionsToTxn (v3) before a partition's first batch, Produce (v9-11, one batch per partition
per request, at most 5 in flight per partition, so the broker's duplicate check covers every
retry). The driver's EndTxn (v<=4, :mod:`transactions`) then commits or aborts what this
producer pre-committed, on brokers of transaction.version 0 and 2 alike.

Retries keep idempotence: a batch keeps its sequence number for life; after a retriable error
(leader moved, not enough replicas, a dropped connection) every unacknowledged batch of that
partition is sent again, in order, to the partition's leader as Metadata then names it; the broker
answers a batch it already has as a duplicate, which counts as delivered. Anything else fails the
producer with a typed error, and the task's transaction is aborted.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import math
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Collection, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from .connection import (
    ApiRange,
    BrokerConnection,
    SecurityConfig,
    deadline_scope,
    error_name,
    split_host_port,
)
from .librdkafka_errors import translate_kafka_error
from .metadata import METADATA_API, ClusterMetadata, request_metadata
from ..errors import (
    BrokersUnavailableError,
    KafkaAuthenticationError,
    KafkaConfigError,
    KafkaProtocolError,
    TransactionError,
    TxKafkaError,
)
from .error_codes import (
    CLUSTER_AUTHORIZATION_FAILED,
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    DUPLICATE_SEQUENCE_NUMBER,
    INVALID_TIMESTAMP,
    INVALID_TIMESTAMP_HINT,
    FENCED_LEADER_EPOCH,
    INVALID_PRODUCER_EPOCH,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    KAFKA_STORAGE_ERROR,
    LEADER_NOT_AVAILABLE,
    MESSAGE_TOO_LARGE,
    NETWORK_EXCEPTION,
    NONE,
    NOT_COORDINATOR,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OPERATION_NOT_ATTEMPTED,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    PRODUCER_FENCED,
    RECORD_LIST_TOO_LARGE,
    REQUEST_TIMED_OUT,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from .protocol import ProtocolError, Reader, Writer
from .config import delivery_timeout_ms
from .record_batch_encoder import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    BatchAccumulator,
    SealedBatch,
    codec_from_config,
    batch_pieces,
)
from .transactions import END_TXN_API, FIND_COORDINATOR_API, TransactionClient

log = logging.getLogger("txkafka.writer")

PRODUCE = 0
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
PRODUCE_API = ApiRange(PRODUCE, "Produce", 9, 11)
INIT_PRODUCER_ID_API = ApiRange(INIT_PRODUCER_ID, "InitProducerId", 2, 4)
# v3: the client adds partitions itself; v4+ are KIP-890's broker-to-broker verification requests.
ADD_PARTITIONS_TO_TXN_API = ApiRange(ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", 3, 3)
# What a transactional WireProducer sends: its coordinator's lookup and its own abort included.
TRANSACTIONAL_PRODUCER_APIS = (METADATA_API, FIND_COORDINATOR_API, INIT_PRODUCER_ID_API,
                               ADD_PARTITIONS_TO_TXN_API, PRODUCE_API, END_TXN_API)

MAX_IN_FLIGHT = 5            # requests per connection and batches per partition: the broker's
                             # duplicate check remembers 5 batches
_REQUEST_BYTES = 16 << 20    # a Produce request's records at most (brokers take 100 MB)
_QUEUED_BYTES = 64 << 20     # encoded batches waiting for the network before send() waits
_METADATA_MAX_AGE_S = 60.0
_METADATA_BACKOFF_S = 0.05   # after every known broker failed a Metadata request, doubling to 1 s
_METADATA_ATTEMPT_MIN_S = 1.0  # the least one broker's Metadata attempt gets (if that much is left)
_RETRY_BACKOFF_S = 0.05      # before a partition's batches are sent again (retry.backoff.ms)
_ANSWER_MARGIN_S = 5.0       # past request.timeout.ms, how long an answer is waited for
_SEQ_MOD = 2**31

# Produce answers after which the partition's unacknowledged batches are sent again.
_PRODUCE_RETRIABLE = {
    UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
    NETWORK_EXCEPTION, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, KAFKA_STORAGE_ERROR,
    FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, CONCURRENT_TRANSACTIONS,
}
# Answers after which a batch may be in the log all the same (appended before the answer went
# wrong, or the request got lost); every other error answer says it was not appended.
_MAYBE_APPENDED = {REQUEST_TIMED_OUT, NETWORK_EXCEPTION, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                   KAFKA_STORAGE_ERROR}
_COORDINATOR_RETRIABLE = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
                          CONCURRENT_TRANSACTIONS, REQUEST_TIMED_OUT}
_COORDINATOR_MOVED = {COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
_FENCED = {INVALID_PRODUCER_EPOCH, PRODUCER_FENCED}


class _Fatal(Exception):
    """Carries a typed error out of a sender thread."""


def _lookup_ran_out(e: TransactionError) -> bool:
    """FindCoordinator still answered "retry" when the link's coordinator client gave up (its
    own timeout; TransactionClient.find_coordinators raises that without a code): a caller with a
    longer budget (the producer's, commitTimeoutMs) asks again, as when no broker answered."""
    return e.code is None


# --------------------------------------------------------------------------- per-worker links

@dataclass
class _Topic:
    partitions: int
    leaders: dict[int, int]
    fetched: float


@dataclass
class _IdempotentState:
    """An idempotent producer id and its next sequence per partition (kept across tasks)."""

    producer_id: int
    producer_epoch: int
    sequences: dict[tuple[str, int], int] = field(default_factory=dict)


class ClusterLink:
    """What a worker process keeps per client config across tasks: connections by broker,
    topic metadata, transaction coordinators (a :class:`TransactionClient`) and idle idempotent
    producer ids. Safe to share between threads."""

    # Metadata retries wait and give up on this clock (the producer's model test runs it virtual).
    clock = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)

    def __init__(self, conf: Mapping[str, object], *, timeout_s: float = 30.0,
                 client_id: str = "txkafka-writer") -> None:
        servers = str(conf.get("bootstrap.servers") or "")
        if not servers:
            raise KafkaConfigError("kafka.bootstrap.servers is empty")
        self.conf = dict(conf)
        self.bootstrap = [split_host_port(s) for s in servers.split(",") if s.strip()]
        self.security = SecurityConfig.from_kafka_config(conf)
        self.client_id = str(conf.get("client.id") or client_id)
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conns: dict[tuple[str, int], BrokerConnection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self._topics: dict[str, _Topic] = {}
        # Brokers whose request failed, and when (this link's clock), until one answers again:
        # a request any broker can answer asks them last, the oldest failure first.
        self._failed: dict[tuple[str, int], float] = {}
        self._idle: list[_IdempotentState] = []
        # Connections a producer's sender owns while it pipelines Produce requests, kept for the
        # next task's producer.
        self._produce_idle: dict[tuple[str, int], list[BrokerConnection]] = {}
        self.coordinators: TransactionClient = _LinkCoordinators(self)

    def close(self) -> None:
        with self._lock:
            conns = list(self._conns.values())
            conns += [c for idle in self._produce_idle.values() for c in idle]
            self._conns.clear()
            self._produce_idle.clear()
        for c in conns:
            c.close()
        self.coordinators.close()

    def produce_connection(self, node: int) -> BrokerConnection:
        """A connection to ``node`` for one sender alone (kept idle ones first)."""
        with self._lock:
            addr = self.brokers.get(node)
            idle = self._produce_idle.get(addr, []) if addr is not None else []
            while idle:
                conn = idle.pop()
                if not conn.closed:
                    return conn
        if addr is None:
            raise KafkaProtocolError(f"broker {node} is not in the cluster's metadata")
        return BrokerConnection(*addr, self.security, client_id=self.client_id)

    def release_produce_connection(self, conn: BrokerConnection, *, reusable: bool) -> None:
        """A sender is done with ``conn``: kept if its stream is clean (no answer pending)."""
        if reusable and not conn.closed:
            with self._lock:
                self._produce_idle.setdefault((conn.host, conn.port), []).append(conn)
                return
        conn.close()

    # ------------------------------------------------------------- connections

    def connection(self, host: str, port: int) -> BrokerConnection:
        with self._lock:
            conn = self._conns.get((host, port))
            if conn is None or conn.closed:
                conn = BrokerConnection(host, port, self.security, client_id=self.client_id)
                self._conns[(host, port)] = conn
        return conn.connect()

    def drop(self, conn: BrokerConnection) -> None:
        """Forget a connection whose request failed (the next request opens a new one); its
        broker is asked last by requests any broker can answer, until it answers again. A
        connection the failure did not break (:attr:`BrokerConnection.broken`: the request only
        waited for it behind another thread's slow one) stays shared, its broker not failed."""
        if not conn.broken:
            return
        addr = (conn.host, conn.port)
        with self._lock:
            if self._conns.get(addr) is conn:
                del self._conns[addr]
            self._failed[addr] = self.clock()
        conn.close()

    def _broker_failed(self, addr: tuple[str, int]) -> None:
        with self._lock:
            self._failed[addr] = self.clock()

    def _broker_answered(self, addr: tuple[str, int]) -> None:
        with self._lock:
            self._failed.pop(addr, None)

    def _brokers_to_ask(self, skip: Collection[tuple[str, int]] = ()) -> list[tuple[str, int]]:
        """Every known broker but ``skip``, best first: connected ones, the bootstrap ones, those
        seen in metadata; brokers whose request failed lately after all of them, the oldest
        failure first (a hung or restarting broker is not asked first again and again)."""
        with self._lock:
            live = [a for a, c in self._conns.items() if c.connected]
            seen = list(self.brokers.values())
            failed = dict(self._failed)
        order = [a for a in dict.fromkeys(live + self.bootstrap + seen) if a not in skip]
        return sorted(order, key=lambda a: failed.get(a, -math.inf))  # stable

    def any_broker(self, skip: Collection[tuple[str, int]] = ()) -> BrokerConnection:
        """A connection to a known broker (but ``skip``), in :meth:`_brokers_to_ask`'s order:
        each is tried in turn until one connects."""
        errors = []
        for addr in self._brokers_to_ask(skip):
            try:
                return self.connection(*addr)
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError as e:
                self._broker_failed(addr)
                errors.append(str(e))
        raise KafkaProtocolError("no broker answered: " + ("; ".join(errors) or "none to ask"))

    def _metadata(self, names: list[str], give_up: float, where: str,
                  budget: str) -> ClusterMetadata:
        """Metadata from the first broker that answers: each known broker in turn (a broken
        connection dropped), round after round with back-off, until ``give_up`` (this link's
        clock), each attempt at most its share of the time left. A broker that is down,
        restarting or hung never fails the call while another answers in time; else
        :class:`BrokersUnavailableError` names each broker asked."""
        asked: dict[tuple[str, int], str] = {}  # broker -> its last failure
        this_round: set[tuple[str, int]] = set()
        backoff = _METADATA_BACKOFF_S
        while True:
            left = give_up - self.clock()
            todo = self._brokers_to_ask(this_round) if left > 0 else []
            if not todo:
                if left <= 0:
                    tried = ", ".join(f"{h}:{p} ({e})" for (h, p), e in asked.items())
                    raise BrokersUnavailableError(
                        f"{where}: no broker answered Metadata for {', '.join(map(repr, names))} "
                        f"within {budget}; asked {tried or 'none: no broker is known'}. Check "
                        "the brokers' health and kafka.bootstrap.servers",
                        tuple(f"{h}:{p}" for h, p in asked))
                self.sleep(min(backoff, left))
                backoff = min(backoff * 2, 1.0)
                this_round.clear()
                continue
            addr = todo[0]
            this_round.add(addr)
            # One broker's share of what is left: a frozen one (its connection still open) must
            # leave time to ask the others.
            attempt = min(left, max(_METADATA_ATTEMPT_MIN_S, left / len(todo)))
            conn = None
            try:
                with deadline_scope(attempt):
                    conn = self.connection(*addr)
                    md = request_metadata(conn, names)
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError as e:
                asked[addr] = str(e)
                if conn is not None:
                    self.drop(conn)
                else:
                    self._broker_failed(addr)
                continue
            self._broker_answered(addr)
            return md

    # ---------------------------------------------------------------- metadata

    def topic(self, name: str, *, refresh: bool = False, where: str = "writing",
              timeout_s: float | None = None, budget: str = "") -> _Topic:
        """Partition count and leaders of ``name`` (cached for a minute, or until refreshed).

        Each Metadata request asks the brokers in turn for up to ``timeout_s`` while they fail or
        do not answer (default the link's timeout; ``budget`` names it in the error), see
        :meth:`_metadata`. A topic the broker does not know yet is asked for again for
        :meth:`propagation_patience_s`.
        """
        with self._lock:
            hit = self._topics.get(name)
        now = self.clock()
        if hit is not None and not refresh and now - hit.fetched < _METADATA_MAX_AGE_S:
            return hit
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        budget = f"{timeout_s:g}s" + (f" ({budget})" if budget else "")
        patience = self.propagation_patience_s()
        give_up = now + patience
        backoff = 0.02
        while True:
            md = self._metadata([name], self.clock() + timeout_s, where, budget)
            err = md.topic_errors.get(name, 0)
            if err == TOPIC_AUTHORIZATION_FAILED:
                raise _error(err, self.conf, where, topic=name)
            if err in (0, LEADER_NOT_AVAILABLE) and md.partitions.get(name):
                break
            if err not in (0, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE):
                raise KafkaProtocolError(f"{where}: Metadata for topic {name!r} answered "
                                         f"{error_name(err)}")
            if self.clock() + backoff > give_up:
                raise _missing_topic(where, name, patience)
            self.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
        leaders = {p: node for (t, p), node in md.leaders.items() if t == name}
        info = _Topic(md.partitions.get(name, 0), leaders, self.clock())
        with self._lock:
            self.brokers.update(md.brokers)
            self._topics[name] = info
        return info

    def propagation_patience_s(self) -> float:
        """How long a topic or partition the cluster does not know is asked for again before it
        counts as missing: ``topic.metadata.propagation.max.ms`` (librdkafka's setting, 30 s). A
        topic created (or partitions added) a moment ago reaches every broker's metadata, and the
        transaction coordinator's, a little later."""
        return int(str(self.conf.get("topic.metadata.propagation.max.ms", 30_000))) / 1000

    # -------------------------------------------------------- idempotent ids

    def take_idempotent(self) -> _IdempotentState | None:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def give_back(self, state: _IdempotentState) -> None:
        with self._lock:
            self._idle.append(state)


class _LinkCoordinators(TransactionClient):
    """A link's coordinator client (FindCoordinator, a task's EndTxn abort) on the link's own
    connections and security settings, asking the brokers the link knows: the bootstrap ones and
    every broker its Metadata named, those that failed lately last (:meth:`ClusterLink.any_broker`).
    A bootstrap broker that restarts (one load-balancer name) must not stop coordinator lookups
    while other brokers answer; the Java client and librdkafka ask any known broker too."""

    def __init__(self, link: ClusterLink) -> None:
        super().__init__(link.conf, timeout=link.timeout_s, client_id=link.client_id,
                         security=link.security)
        self._link = link

    def _conn(self, host: str, port: int) -> BrokerConnection:
        return self._link.connection(host, port)

    def _drop(self, conn: BrokerConnection) -> None:
        self._link.drop(conn)

    def _any_broker(self) -> BrokerConnection:
        return self._link.any_broker()


_LINKS: dict[tuple, ClusterLink] = {}
_LINKS_LOCK = threading.Lock()


# Settings of one producer, not of the cluster or the login: producers differing only in them
# share a worker's link (its connections, metadata, coordinators, idle idempotent ids).
_PRODUCER_ONLY_KEYS = frozenset({
    "compression.type", "compression.codec", "compression.level", "batch.size",
    "message.max.bytes", "message.timeout.ms", "delivery.timeout.ms", "request.timeout.ms",
    "acks", "request.required.acks",
})


def link_for(conf: Mapping[str, object]) -> ClusterLink:
    """The worker's link for this cluster and security config (created on first use, kept until
    the process exits; its connections are closed then)."""
    key = tuple(sorted((str(k), str(v)) for k, v in conf.items()
                       if k not in _PRODUCER_ONLY_KEYS))
    with _LINKS_LOCK:
        link = _LINKS.get(key)
        if link is None:
            link = _LINKS[key] = ClusterLink(conf)
        return link


def _close_links() -> None:
    with _LINKS_LOCK:
        links = list(_LINKS.values())
        _LINKS.clear()
    for link in links:
        link.close()


atexit.register(_close_links)


# --------------------------------------------------------------------------- errors

def _missing_topic(where: str, topic: str, patience_s: float) -> TransactionError:
    return TransactionError(
        f"{where}: topic {topic!r} does not exist (UNKNOWN_TOPIC_OR_PARTITION, still after "
        f"{patience_s:g}s: kafka.topic.metadata.propagation.max.ms); txkafka never creates "
        "topics: create it, or fix the 'topic' option or column", UNKNOWN_TOPIC_OR_PARTITION)


def _error(code: int, conf: Mapping[str, object], where: str, *, topic: str | None = None,
           transactional_id: str | None = None) -> TxKafkaError:
    """The typed error librdkafka's path raises for the same broker answer (same messages)."""
    from confluent_kafka import KafkaError

    return translate_kafka_error(KafkaError(code), conf, action=where, topic=topic,
                                 transactional_id=transactional_id, role="writer")


@dataclass(frozen=True)
class PrecommitResult:
    """What a task hands the driver: the open transaction's identity and what it wrote."""

    transactional_id: str | None
    producer_id: int
    producer_epoch: int
    topic_partitions: dict[str, list[int]]
    record_count: int


# --------------------------------------------------------------------------- partitions

@dataclass(eq=False)  # one batch is itself only (found in its queue by identity)
class _Batch:
    seq: int
    count: int
    pieces: list  # the encoded batch: header, then views of the records (see batch_pieces)
    size: int
    # When delivery is given up: message.timeout.ms from the batch's first record (librdkafka
    # counts it per record), never past the transaction's own timeout.
    deadline: float = math.inf
    acked: bool = False
    sent: bool = False  # written and not yet answered, or answered with a retriable error
    # The error every answer so far gave ("" once an answer left it possibly appended): a batch
    # the broker surely did not append is never taken as delivered by a later one's success.
    refused: str = ""
    maybe_appended: bool = False


@dataclass
class _Partition:
    topic: str
    partition: int
    leader: int
    queue: deque = field(default_factory=deque)  # unacknowledged batches, in sequence order
    inflight: int = 0                            # batches sent and unanswered
    # A retriable answer: nothing more is sent until the batches in flight are answered, then
    # every unacknowledged batch goes again, in order, to the leader Metadata names.
    retry: bool = False
    # Until the broker acknowledged one of this producer's batches here, it has no sequence to
    # check a batch against and appends any: a later batch must not overtake a first batch
    # refused with a retriable error (it would be appended, and the first then refused
    # OUT_OF_ORDER_SEQUENCE_NUMBER). So one batch in flight until the first acknowledgement.
    acked_any: bool = False
    # The last retriable answer here (an error name), for the message of a delivery that fails.
    last_answer: str | None = None


class _Threads:
    """How senders run: a thread each, on real time. (The producer's model test runs them
    instead in one thread, stepped in an order drawn from a seed, on a virtual clock.)"""

    clock = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)

    @staticmethod
    def start(sender: "_NodeSender") -> None:
        sender.thread = threading.Thread(target=sender.run, daemon=True,
                                         name=f"txkafka-produce-{sender.node}")
        sender.thread.start()

    @staticmethod
    def wait(cv: threading.Condition, timeout: float) -> None:
        cv.wait(timeout)

    @staticmethod
    def join(senders: list["_NodeSender"], timeout: float) -> None:
        give_up = time.monotonic() + timeout
        for s in senders:
            if s.thread is not None:
                s.thread.join(max(0.0, give_up - time.monotonic()))


class _NodeSender:
    """Keeps up to MAX_IN_FLIGHT Produce requests in flight to one broker on a connection of its
    own: a new request goes out as soon as one is answered (a rolling window, as librdkafka
    keeps), and the broker handles a connection's requests in the order sent, so each
    partition's batches are appended in sequence order. Once the producer stops or fails it
    sends nothing more but still reads every answer it waits for: until then a Produce of the
    transaction may yet be appended, and an EndTxn must not overtake it."""

    def __init__(self, producer: "WireProducer", node: int) -> None:
        self.producer = producer
        self.node = node
        self.conn: BrokerConnection | None = None
        # (correlation id, the request's batches, when it must be answered by: monotonic time)
        self.inflight: deque[tuple[int, dict[tuple[str, int], _Batch], float]] = deque()
        self.resume_at = 0.0   # the broker throttles this connection until then
        self.done = False
        self.thread: threading.Thread | None = None

    def choose(self) -> tuple[str, object]:
        """(with the producer's lock) The next step: ("send", request), ("receive", None),
        ("wait", seconds or None when idle) or ("done", None)."""
        p = self.producer
        stopping = p._stopping or p._error is not None
        throttled = self.resume_at - p._runner.clock()
        # A login about to expire (KIP-368, a token's lifetime) is renewed only with no answer
        # outstanding (_send): until then nothing more is sent, else a connection kept busy would
        # reach the session's end, and the broker close it with answers in flight.
        renewing = bool(self.inflight) and self.conn is not None and self.conn.login_expiring
        if (not stopping and len(self.inflight) < MAX_IN_FLIGHT and throttled <= 0
                and not renewing):
            req = p._next_request(self.node)
            if req:
                return "send", req
        if self.inflight:
            return "receive", None
        if stopping:
            self.done = True
            return "done", None
        return "wait", throttled if throttled > 0 else None

    def run(self) -> None:
        """A sender thread: steps until the producer stops and nothing is in flight."""
        p = self.producer
        try:
            while True:
                with p._cv:
                    step, req = self.choose()
                    while step == "wait":
                        p._cv.wait(min(0.5, req) if req else 0.5)
                        step, req = self.choose()
                if step == "done":
                    return
                self.act(step, req)
        finally:
            self.finish()

    def act(self, step: str, req: object) -> None:
        """Send ``req`` or read the oldest answer (no lock held: network I/O)."""
        p = self.producer
        sending = req if step == "send" else None
        try:
            try:
                if sending is not None:
                    self._send(sending)
                else:
                    self._receive()
            except KafkaAuthenticationError as e:
                p._fail(e)
                self._lose(sending, str(e))
            except (KafkaProtocolError, ProtocolError) as e:
                # The stream is broken: what was in flight is unanswered (retried in order).
                self._lose(sending, str(e))
        except _Fatal as e:
            p._fail(e.args[0])
        except BaseException as e:  # noqa: BLE001 - re-raised in the task's thread
            p._fail(e)
            self._lose(sending, None)

    def _send(self, req: dict[tuple[str, int], _Batch]) -> None:
        p = self.producer
        if self.conn is None:
            self.conn = p.link.produce_connection(self.node)
        if not self.inflight:
            self.conn.connect_idle()
        body = p._produce_body(req)
        # Written, then answered, within the time the request before it may hold the broker.
        answer_by = time.monotonic() + p.request_timeout_ms / 1000 + _ANSWER_MARGIN_S
        cid = self.conn.send_pipelined(PRODUCE, self.conn.version_for(*PRODUCE_API.spec), body,
                                       flexible=True, deadline=answer_by)
        self.inflight.append((cid, req, answer_by))
        p.produce_requests += 1
        p.produce_bytes += sum(len(x) for x in body)

    def _receive(self) -> None:
        p = self.producer
        assert self.conn is not None
        cid, req, answer_by = self.inflight[0]
        answer, throttle_ms = p._parse_produce(self.conn.receive_pipelined(
            cid, PRODUCE, flexible=True, deadline=answer_by))
        self.inflight.popleft()
        if throttle_ms > 0:
            # KIP-219: the broker answered at once and holds this connection's next requests
            # until the throttle time has passed; sending before then only queues them there.
            self.resume_at = p._runner.clock() + throttle_ms / 1000
            self.conn.throttle(throttle_ms)  # (the connection's next owner waits too)
        p._answered([(req, answer)], "")

    def _lose(self, sending: dict[tuple[str, int], _Batch] | None, failure: str | None) -> None:
        """The connection broke: every request on it is unanswered (its batches go again, in
        order, unless the producer failed); the connection is dropped."""
        lost = [(r, None) for _, r, _ in self.inflight]
        if sending is not None and not any(r is sending for r, _ in lost):
            lost.append((sending, None))
        self.inflight.clear()
        if self.conn is not None:
            self.producer.link.release_produce_connection(self.conn, reusable=False)
            self.conn = None
        if lost:
            self.producer._answered(lost, failure or "")

    def finish(self) -> None:
        if self.conn is not None:
            self.producer.link.release_produce_connection(self.conn,
                                                          reusable=not self.inflight)
            self.conn = None


_THREADS = _Threads()


class WireProducer:
    """One task's producer. Transactional when ``transactional_id`` is given (the transaction is
    left open by :meth:`flush`, for the driver's EndTxn), else idempotent.

    ``where`` names the task in errors ("batch 3, task partition 7").
    """

    def __init__(self, conf: Mapping[str, object], *, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000, link: ClusterLink | None = None,
                 where: str = "writing", timeout_s: float | None = None) -> None:
        """``timeout_s``: how long InitProducerId and AddPartitionsToTxn are retried (the sink's
        commitTimeoutMs; default the link's)."""
        self.conf = dict(conf)
        self.link = link if link is not None else link_for(conf)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.where = where
        self.timeout_s = self.link.timeout_s if timeout_s is None else timeout_s
        self.codec = codec_from_config(conf)
        level = conf.get("compression.level")
        self.level = int(str(level)) if level is not None else None
        self.batch_bytes = int(str(conf.get("batch.size", DEFAULT_BATCH_BYTES)))
        self.max_bytes = int(str(conf.get("message.max.bytes", DEFAULT_MAX_MESSAGE_BYTES)))
        self.delivery_timeout_s = delivery_timeout_ms(
            conf, transaction_timeout_ms if transactional_id is not None else None) / 1000.0
        self.request_timeout_ms = int(str(conf.get("request.timeout.ms", 30_000)))
        self.producer_id = -1
        self.producer_epoch = -1
        self.count = 0
        self._idem: _IdempotentState | None = None
        self._acc: dict[str, BatchAccumulator] = {}
        self._parts: dict[tuple[str, int], _Partition] = {}
        self._in_txn: set[tuple[str, int]] = set()
        # An AddPartitionsToTxn whose answer never came: the coordinator may have added its
        # partitions (the transaction open) all the same, so abort() ends it. (An answer with
        # errors says none was added: the request is all or nothing.)
        self._maybe_in_txn = False
        self._cv = threading.Condition()  # (an RLock: the model test steps senders inside)
        self._runner = _THREADS
        self._sticky_rng: random.Random | None = None  # null keys' partitions (tests seed it)
        self._senders: dict[int, _NodeSender] = {}
        self._queued = 0
        self._error: BaseException | None = None
        self._stopping = False
        # The transaction's own end (its timeout counts from the first partition added).
        self._txn_deadline = math.inf
        self.produce_requests = 0  # Produce requests written, and their bytes
        self.produce_bytes = 0

    # ------------------------------------------------------------------ start

    def begin(self) -> tuple[int, int]:
        """Get a producer id and epoch: InitProducerId at the transaction's coordinator (which
        fences an earlier holder of the id and aborts its open transaction), or an idle
        idempotent id of this worker. Returns (producer id, epoch)."""
        if self.transactional_id is None:
            self._idem = self.link.take_idempotent()
            if self._idem is None:
                pid, epoch = self._init_producer_id(None)
                self._idem = _IdempotentState(pid, epoch)
            self.producer_id, self.producer_epoch = self._idem.producer_id, \
                self._idem.producer_epoch
        else:
            self.producer_id, self.producer_epoch = self._init_producer_id(self.transactional_id)
        return self.producer_id, self.producer_epoch

    def _init_producer_id(self, tid: str | None) -> tuple[int, int]:
        where = f"starting transaction {tid}" if tid else f"{self.where}: InitProducerId"
        deadline = time.monotonic() + self.timeout_s
        backoff = 0.01
        refresh = False
        failure = ""
        while True:
            conn = None
            try:
                # One attempt (a hung broker's included) within what is left of the timeout.
                with deadline_scope(max(0.0, deadline - time.monotonic())):
                    if tid is None:
                        conn = self.link.any_broker()
                    else:
                        coordinator = self.link.coordinators.coordinator(tid, refresh)
                        conn = self.link.connection(*coordinator)
                    v = conn.version_for(*INIT_PRODUCER_ID_API.spec)
                    w = Writer(True).string(tid).int32(self.transaction_timeout_ms)
                    if v >= 3:
                        w.int64(-1).int16(-1)
                    r = conn.request(INIT_PRODUCER_ID, v, w.tags().build(), flexible=True)
                    conn.throttle(r.int32())
                    err, pid, epoch = r.int16(), r.int64(), r.int16()
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError as e:
                if conn is not None:
                    self.link.drop(conn)
                err, failure = COORDINATOR_NOT_AVAILABLE, f" (last: {e})"
            except TransactionError as e:
                if not _lookup_ran_out(e):
                    raise
                err, failure = COORDINATOR_NOT_AVAILABLE, f" (last: {e})"
            if err == NONE:
                return pid, epoch
            if err in (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED):
                raise _error(err, self.conf, where, transactional_id=tid)
            if err == INVALID_TRANSACTION_TIMEOUT:
                raise KafkaConfigError(
                    f"{where}: the broker refused kafka.transaction.timeout.ms="
                    f"{self.transaction_timeout_ms} (INVALID_TRANSACTION_TIMEOUT): it must not "
                    "exceed the broker's transaction.max.timeout.ms (15 minutes by default)")
            if err not in _COORDINATOR_RETRIABLE or time.monotonic() + backoff > deadline:
                raise TransactionError(f"{where}: InitProducerId answered {error_name(err)}"
                                       f"{failure}", err)
            refresh = err in _COORDINATOR_MOVED
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.5)

    # ------------------------------------------------------------------ send

    def send(self, topic: str, values: pa.Array, *, keys: pa.Array | None = None,
             headers: pa.Array | None = None, partitions: pa.Array | None = None,
             timestamp_ms: int | None = None) -> None:
        """Encode the rows into batches of ``topic``; full batches go to the network at once."""
        self._raise_if_failed()
        if self.producer_id < 0:
            raise TransactionError("WireProducer.send before begin()")
        acc = self._acc.get(topic)
        if acc is None:
            timeout_s, budget = self._metadata_patience()
            info = self.link.topic(topic, where=self.where, timeout_s=timeout_s, budget=budget)
            acc = self._acc[topic] = BatchAccumulator(
                topic, info.partitions, batch_bytes=self.batch_bytes, max_batch_bytes=self.max_bytes,
                rng=self._sticky_rng)
        if partitions is not None:
            self._see_added_partitions(acc, partitions)
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        self.count += acc.append(keys, values, headers=headers, partitions=partitions,
                                 timestamp_ms=ts, now=self._runner.clock())
        if acc.sealed:
            self._dispatch(acc)

    def _see_added_partitions(self, acc: BatchAccumulator, partitions: pa.Array) -> None:
        """A row's ``partition`` past the topic's partition count as the worker last read it:
        Metadata is asked again before the row is refused. Partitions added to the topic of a
        running stream exist at once, and the worker's link keeps Metadata for a minute."""
        top = pc.max(partitions).as_py()
        if top is None or top < acc.partitions:
            return
        timeout_s, budget = self._metadata_patience()
        info = self.link.topic(acc.topic, refresh=True, where=self.where, timeout_s=timeout_s,
                               budget=budget)
        acc.partitions = max(acc.partitions, info.partitions)

    def _dispatch(self, acc: BatchAccumulator) -> None:
        """Sealed batches: add new partitions to the transaction, give each its sequence, encode
        (compression, CRC) and queue it for its leader's sender."""
        sealed: list[SealedBatch] = []
        while acc.sealed:
            sealed.append(acc.sealed.popleft())
        if self.transactional_id is not None:
            new = sorted({(b.topic, b.partition) for b in sealed} - self._in_txn)
            if new:
                self._add_partitions(new)
        transactional = self.transactional_id is not None
        for sb in sealed:
            key = (sb.topic, sb.partition)
            part = self._parts.get(key)
            if part is None:
                leader = self._leader(sb.topic, sb.partition)
                with self._cv:  # senders walk the map under the lock
                    part = self._parts[key] = _Partition(sb.topic, sb.partition, leader)
            seqs = self._idem.sequences if self._idem is not None else self._sequences
            seq = seqs.get(key, 0)
            pieces = batch_pieces(sb, codec=self.codec, producer_id=self.producer_id,
                                  producer_epoch=self.producer_epoch, base_sequence=seq,
                                  transactional=transactional, level=self.level)
            size = sum(len(x) for x in pieces)
            deadline = min(sb.created + self.delivery_timeout_s, self._txn_deadline)
            with self._cv:
                while self._queued > _QUEUED_BYTES and self._error is None:
                    self._runner.wait(self._cv, 0.5)
                if self._error is not None:
                    break
                part.queue.append(_Batch(seq, sb.count, pieces, size, deadline))
                seqs[key] = (seq + sb.count) % _SEQ_MOD  # spent once queued, never on a failure
                self._queued += size
                self._ensure_sender(part.leader)
                self._cv.notify_all()
        self._raise_if_failed()

    @property
    def _sequences(self) -> dict[tuple[str, int], int]:
        # Transactional: sequences start at 0 with each new epoch (each begin()).
        seqs = self.__dict__.get("_txn_sequences")
        if seqs is None:
            seqs = self.__dict__["_txn_sequences"] = {}
        return seqs

    def _metadata_patience(self, *, sender: bool = False) -> tuple[float, str]:
        """How long a Metadata request of this producer asks the brokers in turn while they fail
        (ClusterLink.topic's timeout_s and budget). The task's thread: the delivery timeout,
        which bounds the records it holds (librdkafka keeps them queued that long while no
        broker answers). A sender: one request timeout; its caller retries after that, until the
        batches' delivery limit."""
        if sender:
            return self.request_timeout_ms / 1000, "kafka.request.timeout.ms"
        return self.delivery_timeout_s, "the delivery timeout: kafka.message.timeout.ms" + (
            ", at most kafka.transaction.timeout.ms" if self.transactional_id else "")

    def _leader(self, topic: str, partition: int, refresh: bool = False) -> int:
        """(the task's thread) The partition's leader, -1 if Metadata names none."""
        timeout_s, budget = self._metadata_patience()
        info = self.link.topic(topic, refresh=refresh, where=self.where, timeout_s=timeout_s,
                               budget=budget)
        node = info.leaders.get(partition)
        if node is None and not refresh:
            return self._leader(topic, partition, refresh=True)
        return -1 if node is None else node

    # ------------------------------------------------------------ transaction

    def _add_partitions(self, new: list[tuple[str, int]]) -> None:
        """AddPartitionsToTxn at the coordinator (one request for all of them), retried while
        the coordinator finishes this id's previous transaction or moves."""
        tid = self.transactional_id
        assert tid is not None
        by_topic: dict[str, list[int]] = {}
        for t, p in new:
            by_topic.setdefault(t, []).append(p)
        topics = sorted(by_topic.items())
        started = self._runner.clock()  # the transaction's timeout may start counting now
        deadline = time.monotonic() + self.timeout_s
        patience = self.link.propagation_patience_s()
        missing_by: float | None = None  # given up on an unknown partition then
        backoff = 0.005
        refresh = False
        while True:
            conn = None
            errors: dict[tuple[str, int], int] = {}
            try:
                with deadline_scope(max(0.0, deadline - time.monotonic())):
                    conn = self.link.connection(*self.link.coordinators.coordinator(tid, refresh))
                    v = conn.version_for(*ADD_PARTITIONS_TO_TXN_API.spec)
                    body = (Writer(True).string(tid).int64(self.producer_id)
                            .int16(self.producer_epoch)
                            .array(topics, lambda w, tp: w.string(tp[0])
                                   .array(tp[1], lambda ww, p: ww.int32(p)).tags())
                            .tags().build())
                    r = conn.request(ADD_PARTITIONS_TO_TXN, v, body, flexible=True)
                    conn.throttle(r.int32())
                    for _ in range(r.uvarint() - 1):
                        name = r.string() or ""
                        for _ in range(r.uvarint() - 1):
                            p, err = r.int32(), r.int16()
                            r.tags()
                            if err:
                                errors[(name, p)] = err
                        r.tags()
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError:
                if conn is not None:
                    self._maybe_in_txn = True  # sent, perhaps handled, and unanswered
                    self.link.drop(conn)
                errors = {new[0]: COORDINATOR_NOT_AVAILABLE}
            except TransactionError as e:
                if not _lookup_ran_out(e):
                    raise
                errors = {new[0]: COORDINATOR_NOT_AVAILABLE}
            if not errors:
                if not self._in_txn:
                    self._txn_deadline = started + self.transaction_timeout_ms / 1000
                self._in_txn.update(new)
                return
            real = {k: e for k, e in errors.items() if e != OPERATION_NOT_ATTEMPTED}
            (topic, _p), err = next(iter(real.items())) if real else next(iter(errors.items()))
            where = f"{self.where}: adding {topic!r} to transaction {tid}"
            if err in (TOPIC_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED):
                raise _error(err, self.conf, where, topic=topic, transactional_id=tid)
            if err in _FENCED:
                raise self._fenced(err)
            if err == UNKNOWN_TOPIC_OR_PARTITION:
                # The coordinator's metadata may not have the partition yet (a topic just
                # created, partitions just added, a coordinator lagging behind): asked again, as
                # librdkafka and the Java client do, as long as a topic's metadata would be.
                if missing_by is None:
                    missing_by = time.monotonic() + patience
                if time.monotonic() + backoff > missing_by:
                    raise _missing_topic(where, topic, patience)
            elif err not in _COORDINATOR_RETRIABLE or time.monotonic() + backoff > deadline:
                raise TransactionError(f"{where}: AddPartitionsToTxn answered {error_name(err)}",
                                       err)
            refresh = err in _COORDINATOR_MOVED
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.2)

    def _fenced(self, err: int) -> TransactionError:
        return TransactionError(
            f"{self.where}: transaction {self.transactional_id} was fenced ({error_name(err)}): "
            "a newer producer with this transactional id (a later attempt of this task, or an "
            "operator's) took it over, so this attempt's records will never be committed", err)

    # ---------------------------------------------------------------- senders

    def _ensure_sender(self, node: int) -> None:
        """(with the lock) A sender for ``node``'s partitions."""
        s = self._senders.get(node)
        if s is None or s.done:
            s = self._senders[node] = _NodeSender(self, node)
            self._runner.start(s)

    def _fail(self, err: BaseException) -> None:
        """Record the producer's first failure: nothing new is sent from then on."""
        with self._cv:
            if self._error is None:
                self._error = err
            self._cv.notify_all()

    def _next_request(self, node: int) -> dict[tuple[str, int], _Batch]:
        """(with the lock) The next request to ``node``: each of its partitions' first unsent
        batch (one batch per partition per request; at most MAX_IN_FLIGHT per partition, the
        broker's duplicate window), up to _REQUEST_BYTES; empty when there is nothing to send. A
        partition left out by the size cap sends its batch in the next request: its batches
        always go in sequence order."""
        req: dict[tuple[str, int], _Batch] = {}
        size = 0
        for key, p in self._parts.items():
            limit = MAX_IN_FLIGHT if p.acked_any else 1
            if p.leader != node or p.retry or p.inflight >= limit or not p.queue:
                continue
            batch = next((b for b in p.queue if not b.sent and not b.acked), None)
            if batch is None or (req and size + batch.size > _REQUEST_BYTES):
                continue
            req[key] = batch
            size += batch.size
        for key, batch in req.items():
            batch.sent = True
            self._parts[key].inflight += 1
        return req

    def _produce_body(self, req: dict[tuple[str, int], _Batch]) -> list:
        by_topic: dict[str, list[tuple[int, _Batch]]] = {}
        for (t, p), b in req.items():
            by_topic.setdefault(t, []).append((p, b))
        w = Writer(True).string(self.transactional_id).int16(-1).int32(self.request_timeout_ms)

        def one(x: Writer, pb: tuple[int, _Batch]) -> None:
            x.int32(pb[0]).uvarint(pb[1].size + 1)  # compact bytes: the batch, unjoined
            x.parts.extend(pb[1].pieces)
            x.tags()

        w.array(sorted(by_topic.items()), lambda ww, tp: ww.string(tp[0]).array(tp[1], one).tags())
        return w.tags().pieces()

    def _state_lost(self, key: tuple[str, int], acked: _Batch, lost: _Batch) -> TransactionError:
        """A success after an earlier batch's sure refusal: the broker kept no sequence for this
        producer (an unclean leader election, or its state expired with the log's head), so the
        refused records would be missing with nothing said. The task fails instead."""
        return TransactionError(
            f"{self.where}: the broker acknowledged records for {key[0]}[{key[1]}] (sequence "
            f"{acked.seq}) after refusing the {lost.count} before them (sequence {lost.seq}: "
            f"{lost.refused}); only a broker that lost this producer's state does that (an "
            f"unclean leader election, or state expired with the log's head), and those records "
            f"would be missing: the task fails rather than skip them (Spark runs it again)")

    def _answered(self, done: list[tuple[dict[tuple[str, int], _Batch],
                                          dict[tuple[str, int], int] | None]],
                  failure: str) -> None:
        """Apply answers (None: the request went unanswered, a broken connection). Batches
        acknowledged leave their queue, and so does every earlier batch of their partition: the
        broker appends a producer's batches in sequence order, so a later one's acknowledgement
        proves the earlier ones were appended, whatever their own answer said, unless an answer
        said one surely was not (then the broker lost this producer's state: _state_lost). A retriable answer stops the partition until its batches in flight are answered,
        then the unacknowledged ones all go again, in order, to the current leader."""
        fatal: BaseException | None = None
        again: list[tuple[str, int]] = []
        codes: set[str] = set()  # the retriable answers, for the log and errors
        now = self._runner.clock()
        with self._cv:
            for req, answer in done:
                for key, batch in req.items():
                    part = self._parts[key]
                    part.inflight -= 1
                    code = NETWORK_EXCEPTION if answer is None else answer.get(
                        key, NETWORK_EXCEPTION)
                    if batch.acked:
                        pass  # settled by a later batch's acknowledgement
                    elif code in (NONE, DUPLICATE_SEQUENCE_NUMBER):
                        # (also after an earlier batch's retriable answer: that one was then
                        # appended after all, and its resend is answered as a duplicate)
                        earlier = list(itertools.islice(part.queue, part.queue.index(batch)))
                        lost = next((b for b in earlier if not b.acked and b.refused
                                     and not b.maybe_appended), None)
                        if lost is not None:
                            fatal = fatal or self._state_lost(key, batch, lost)
                            continue
                        for b in [*earlier, batch]:
                            b.acked = True
                        part.acked_any = True
                    else:
                        if code in _MAYBE_APPENDED:
                            batch.maybe_appended = True
                        else:
                            batch.refused = error_name(code)
                        first_unacked = next((b for b in part.queue if not b.acked), None)
                        if code in _PRODUCE_RETRIABLE or (
                                code == OUT_OF_ORDER_SEQUENCE_NUMBER
                                and (part.retry or first_unacked is not batch)):
                            # (out of order behind an unacknowledged batch: resent in order)
                            part.retry = True
                            if answer is not None:
                                codes.add(error_name(code))
                                part.last_answer = error_name(code)
                        elif fatal is None:
                            fatal = self._produce_error(code, key, batch)
                    while part.queue and part.queue[0].acked:
                        self._queued -= part.queue.popleft().size
                    if part.retry and part.inflight == 0 and key not in again:
                        again.append(key)
            failure = ", ".join(sorted(codes | ({failure} if failure else set())))
            if fatal is None and self._error is None:
                late = [(k, self._parts[k].queue[0]) for k in sorted(again)
                        if self._parts[k].queue and self._parts[k].queue[0].deadline < now]
                if late:
                    (topic, p), batch = late[0]
                    fatal = TransactionError(
                        f"{self.where}: {batch.count} record(s) for {topic}[{p}] were not "
                        f"delivered within {self.delivery_timeout_s:g}s (the last answer: "
                        f"{failure or 'a retriable broker error'}); check the brokers' health")
            if fatal is not None:
                raise _Fatal(fatal)
            self._cv.notify_all()
            if self._error is not None:
                return  # failed: nothing is sent again
        if again:
            log.info("%s: produce to %d partition(s) will be retried (%s)", self.where,
                     len(again), failure or "retriable broker errors")
            self._runner.sleep(_RETRY_BACKOFF_S)
        # Fresh leaders: one Metadata request per topic. When no broker answered one within the
        # request timeout, the other topics are not asked now either (this sender would wait that
        # long for each): their partitions stay where they were, and are retried later.
        timeout_s, budget = self._metadata_patience(sender=True)
        fresh: dict[str, _Topic | None] = {}
        for key in again:
            topic, partition = key
            if topic not in fresh:
                try:
                    fresh[topic] = self.link.topic(topic, refresh=True, where=self.where,
                                                   timeout_s=timeout_s, budget=budget)
                except KafkaAuthenticationError as e:
                    raise _Fatal(e) from None
                except BrokersUnavailableError:
                    fresh = dict.fromkeys((t for t, _ in again), None)
                except TransactionError as e:
                    if e.code == UNKNOWN_TOPIC_OR_PARTITION:  # (deleted: no retry brings it back)
                        raise _Fatal(e) from None
                    fresh[topic] = None
                except KafkaProtocolError:
                    fresh[topic] = None
            info = fresh[topic]
            leader = info.leaders.get(partition, -1) if info is not None else -1
            with self._cv:
                part = self._parts[key]
                if leader >= 0:
                    part.leader = leader
                for b in part.queue:
                    b.sent = False
                part.retry = False
                if self._error is None:
                    self._ensure_sender(part.leader)
                self._cv.notify_all()

    @staticmethod
    def _parse_produce(r: Reader) -> tuple[dict[tuple[str, int], int], int]:
        """Each partition's error code, and the broker's throttle time (ms)."""
        out: dict[tuple[str, int], int] = {}
        for _ in range(r.uvarint() - 1):
            name = r.string() or ""
            for _ in range(r.uvarint() - 1):
                p, err = r.int32(), r.int16()
                r.int64()  # base offset
                r.int64()  # log append time
                r.int64()  # log start offset
                for _ in range(r.uvarint() - 1):  # record errors
                    r.int32()
                    r.string()
                    r.tags()
                r.string()  # error message
                r.tags()    # v10+: the current leader
                out[(name, p)] = err
            r.tags()
        return out, r.int32()

    def _produce_error(self, code: int, key: tuple[str, int], batch: _Batch) -> BaseException:
        topic, p = key
        where = f"{self.where}: writing {topic}[{p}]"
        if code in (TOPIC_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    CLUSTER_AUTHORIZATION_FAILED):
            return _error(code, self.conf, self.where, topic=topic,
                          transactional_id=self.transactional_id)
        if code in _FENCED:
            return self._fenced(code)
        if code == INVALID_TIMESTAMP:
            return TransactionError(f"{where}: {batch.count} record(s): {INVALID_TIMESTAMP_HINT}",
                                    code)
        if code in (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE):
            return TransactionError(
                f"{where}: the broker refused a batch of {batch.count} record(s), "
                f"{batch.size:,} bytes ({error_name(code)}): larger than the topic's "
                "max.message.bytes. Lower kafka.batch.size (or kafka.message.max.bytes) below it, "
                "or raise the topic's max.message.bytes", code)
        return TransactionError(f"{batch.count} record(s) failed delivery in {self.where}; "
                                f"first: {topic}[{p}]: {error_name(code)} (sequence "
                                f"{batch.seq}, producer id {self.producer_id}, epoch "
                                f"{self.producer_epoch})", code)

    def _raise_if_failed(self) -> None:
        with self._cv:
            err = self._error
        if err is not None:
            raise err

    # ---------------------------------------------------------------- finish

    def flush(self) -> PrecommitResult:
        """Send everything and wait until every batch is acknowledged (acks=all). The
        transaction stays open: the result is what the driver needs to commit it."""
        self._raise_if_failed()
        for acc in self._acc.values():
            acc.drain()
            if acc.sealed:
                self._dispatch(acc)
        with self._cv:
            # Also until no request is in flight (one may carry a batch a later one's
            # acknowledgement settled): the driver's EndTxn must not overtake a Produce.
            while self._error is None and any(p.queue or p.inflight
                                              for p in self._parts.values()):
                # A backstop: answers (errors included) normally end a late batch sooner.
                now = self._runner.clock()
                late = [p for p in self._parts.values() for b in p.queue  # a late batch's part
                        if b.deadline + _ANSWER_MARGIN_S < now]
                if late:
                    answers = sorted({p.last_answer for p in late if p.last_answer})
                    self._error = TransactionError(
                        f"{self.where}: {len(late)} batch(es) not acknowledged within "
                        f"{self.delivery_timeout_s:g}s of their first record (the last answer: "
                        f"{', '.join(answers) or 'none'}); check the brokers' health")
                    break
                self._runner.wait(self._cv, 0.5)
            unacked = sum(len(p.queue) for p in self._parts.values())
        self._raise_if_failed()
        if unacked:  # never reached: the loop ends with every batch acknowledged or an error
            raise TransactionError(f"{self.where}: {unacked} batch(es) unacknowledged")
        written: dict[str, list[int]] = {}
        for t, p in sorted(self._parts):
            written.setdefault(t, []).append(p)
        return PrecommitResult(self.transactional_id, self.producer_id, self.producer_epoch,
                               written, self.count)

    def _stop_senders(self) -> bool:
        """Stop sending; wait until every request in flight is answered or its connection has
        failed (each is bounded by request.timeout.ms). False if a sender is still waiting."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
            senders = list(self._senders.values())
        self._runner.join(senders, self.request_timeout_ms / 1000 + 2 * _ANSWER_MARGIN_S)
        with self._cv:
            return all(s.done or not s.inflight for s in senders)

    def abort(self) -> None:
        """Abort the open transaction at once (EndTxn abort), once no Produce request of it is in
        flight (the Java client's rule: a Produce handled after the abort would reopen the
        transaction on its partition), so readers are not held up until its timeout. Also after
        an AddPartitionsToTxn that went unanswered: the transaction may be open all the same."""
        quiet = self._stop_senders()
        if (self.transactional_id is None or self.producer_id < 0
                or not (self._in_txn or self._maybe_in_txn)):
            return
        if not quiet:
            log.warning("%s: Produce requests of transaction %s are still unanswered; not "
                        "aborting it now (the committer's sweep or its timeout ends it)",
                        self.where, self.transactional_id)
            return
        code = self.link.coordinators.end_txn(self.transactional_id, self.producer_id,
                                              self.producer_epoch, commit=False)
        if code == INVALID_TXN_STATE and not self._in_txn:
            # (EndTxn v<=4 on a transaction that never started: no partition was added after all)
            log.debug("%s: transaction %s had not started: nothing to abort", self.where,
                      self.transactional_id)
        elif code not in (NONE, *_FENCED):
            log.warning("%s: aborting transaction %s answered %s", self.where,
                        self.transactional_id, error_name(code))

    def close(self) -> None:
        """Stop the senders; an idempotent id goes back to the worker's pool if it is clean.
        Never ends the transaction: the driver commits or aborts it."""
        self._stop_senders()
        if self._idem is not None:
            if self._error is None and not any(p.queue for p in self._parts.values()):
                self.link.give_back(self._idem)
            self._idem = None
