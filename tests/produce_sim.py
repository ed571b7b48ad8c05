"""A simulated Kafka cluster that txkafka's real producer (wire_producer.WireProducer) talks to.

It stands where the producer's ClusterLink and BrokerConnections stand: the producer encodes real
Produce requests (v11), AddPartitionsToTxn and InitProducerId; the simulation parses them, applies
Kafka's rules and answers in the real response formats. The rules (ProducerStateManager's):
per-partition sequence numbers, the last 5 batches of a producer remembered for the duplicate
check (a batch found there is answered as a duplicate, not appended), OUT_OF_ORDER_SEQUENCE_NUMBER
for any other sequence than the next one (any sequence is taken while the partition holds no
batch of the producer), NOT_LEADER_OR_FOLLOWER from a broker that does not lead the partition.
acks=all: an answer of success means the batch is replicated; a leader change keeps every such
batch and may truncate the unreplicated tail (batches answered REQUEST_TIMED_OUT or
NOT_ENOUGH_REPLICAS_AFTER_APPEND, or never answered).

Faults are drawn from a seeded random.Random: refused batches (NOT_ENOUGH_REPLICAS), appended but
unconfirmed ones (NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT after the request timeout),
connections cut before or after the broker appended (a hung broker: after the client's request
timeout), leaders moving (with stale metadata for a while), throttled answers (the broker then
holds the connection's next requests until the throttle ends), Metadata requests failing at a
broker (cut, or unanswered until the connection's attempt timeout).

:class:`SimLink` is the producer's real ClusterLink (its Metadata retries across brokers, its
connection handling) over simulated broker connections; only Produce connections and the
coordinator are the simulation's own.

Two ways to run the producer's senders: threads (the producer's own runner) with real time, for
tests of one defect; or :class:`StepRunner`, which steps every sender in the test's thread in an
order drawn from the seed, on a virtual clock, so a seed replays exactly.
"""

from __future__ import annotations

import random
import struct
import threading
import time
from dataclasses import dataclass, field

from txkafka.connector.client import producer as wire_producer
from txkafka.connector.client.connection import ATTEMPT_TIMEOUT_S
from txkafka.connector.client.metadata import METADATA
from txkafka.connector.errors import KafkaProtocolError
from txkafka.connector.client.error_codes import (
    DUPLICATE_SEQUENCE_NUMBER,
    INVALID_TXN_STATE,
    NONE,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    REQUEST_TIMED_OUT,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from txkafka.connector.client.protocol import Reader, Writer
from txkafka.connector.client.record_batch_decoder import decode

_HEADER = struct.Struct(">qiibIhiqqqhii")  # a record batch's header, through its record count
WINDOW = 5  # batches per producer and partition the broker remembers for its duplicate check


@dataclass
class Faults:
    """Probabilities of each fault (per batch in a request, or per request)."""

    refuse: float = 0.0          # NOT_ENOUGH_REPLICAS, nothing appended
    after_append: float = 0.0    # appended, answered NOT_ENOUGH_REPLICAS_AFTER_APPEND
    timed_out: float = 0.0       # appended, answered REQUEST_TIMED_OUT after the request timeout
    cut_before: float = 0.0      # the connection breaks before the broker reads the request
    cut_after: float = 0.0       # the broker appends, the answer is lost with the connection
    hang: float = 0.0            # no answer until the client's request timeout, then cut
    leader_move: float = 0.0     # a partition's leader moves before the request is handled
    stale_metadata: float = 0.0  # a Metadata answer still names the previous leader
    throttle: float = 0.0        # the answer asks the client to wait (and the broker mutes)
    coordinator_busy: float = 0.0  # AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS
    metadata_fail: float = 0.0   # a Metadata request at a broker: its connection cut, or no answer

    @classmethod
    def draw(cls, rng: random.Random) -> "Faults":
        """A mix for one seed: each fault off, rare or frequent."""
        def p(hi: float) -> float:
            return rng.choice([0.0, hi / 4, hi])
        return cls(refuse=p(0.15), after_append=p(0.1), timed_out=p(0.02), cut_before=p(0.06),
                   cut_after=p(0.08), hang=p(0.015), leader_move=p(0.06),
                   stale_metadata=p(0.3), throttle=p(0.1), coordinator_busy=p(0.2),
                   metadata_fail=p(0.4))

    def names(self) -> list[str]:
        return [k for k, v in self.__dict__.items() if v]


class VirtualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


@dataclass
class LogBatch:
    producer_id: int
    epoch: int
    first_seq: int
    count: int
    records: bytes           # the whole batch as sent
    replicated: bool = False  # acks=all satisfied: survives any leader change

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.count - 1


@dataclass
class _Pending:
    """A request written to a connection, not yet handled by the broker."""

    cid: int
    body: bytes
    sent_at: float


@dataclass
class Stats:
    produce_requests: int = 0
    empty_requests: int = 0
    batches_sent: int = 0
    faults: dict[str, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.faults[what] = self.faults.get(what, 0) + 1


class SimCluster:
    """The brokers, the partitions' logs and the transaction coordinator."""

    def __init__(self, rng: random.Random, faults: Faults, *, topics: dict[str, int],
                 nodes: tuple[int, ...] = (1, 2, 3), clock: VirtualClock | None = None,
                 request_timeout_s: float = 30.0) -> None:
        self.rng = rng
        self.faults = faults
        self.nodes = nodes
        self.topics = topics
        self.clock = clock
        self.request_timeout_s = request_timeout_s
        self.lock = threading.RLock()
        self.leaders = {(t, p): nodes[(i + p) % len(nodes)]
                        for i, (t, n) in enumerate(sorted(topics.items())) for p in range(n)}
        self.stale: dict[tuple[str, int], int] = {}  # metadata still naming the old leader
        self.logs: dict[tuple[str, int], list[LogBatch]] = {k: [] for k in self.leaders}
        self.in_txn: set[tuple[str, int]] = set()
        self.conns: list[SimConnection] = []
        self.violations: list[str] = []
        self.stats = Stats()
        self.end_txn_calls: list[tuple[bool, int]] = []  # (commit, requests outstanding then)
        self.answer_delay_s: dict[int, float] = {}       # threads only: a slow broker
        # (topic, partition, sequence, attempt from 1): the fault that attempt meets, one of
        # Faults' names, "denied" (TOPIC_AUTHORIZATION_FAILED), "ok", or "cut_all" (appended,
        # the broker handles every request behind it on the connection, all answers are lost)
        self.scripted: dict[tuple[str, int, int, int], str] = {}
        self.attempts: dict[tuple[str, int, int], int] = {}
        self.cut_pending = False
        self.next_pid = 4000
        self.metadata_down: set[int] = set()  # nodes whose Metadata requests are all cut
        # Error codes the coordinator answers the next AddPartitionsToTxn requests with, one
        # request each, for all their partitions (none added).
        self.add_partitions_answers: list[int] = []
        # The next AddPartitionsToTxn requests whose answers are lost with their connection, one
        # request each: True, the coordinator handled it (as above); False, it never arrived.
        self.add_partitions_lost: list[bool] = []
        self.metadata_requests: dict[int, int] = {}  # node -> Metadata requests it got

    # ------------------------------------------------------------------ time

    def now(self) -> float:
        return self.clock() if self.clock is not None else time.monotonic()

    def spend(self, seconds: float) -> None:
        """Time a broker takes (virtual: the clock moves; threads: nothing, answers come now)."""
        if self.clock is not None:
            self.clock.advance(seconds)

    # ------------------------------------------------------------------ produce

    def outstanding(self) -> int:
        with self.lock:
            return sum(len(c.pending) for c in self.conns)

    def handle_produce(self, node: int, body: bytes) -> tuple[dict[tuple[str, int], int], int]:
        """Handle one Produce request at ``node``: the answer per partition, throttle ms."""
        with self.lock:
            r = Reader(body, True)
            tid = r.string()
            acks = r.int16()
            r.int32()
            if acks != -1:
                self.violations.append(f"Produce with acks={acks}, not all")
            entries: list[tuple[str, int, bytes]] = []
            for _ in range(r.uvarint() - 1):
                name = r.string() or ""
                for _ in range(r.uvarint() - 1):
                    p = r.int32()
                    records = bytes(r.view(r.uvarint() - 1))
                    r.tags()
                    entries.append((name, p, records))
                r.tags()
            r.tags()
            self.stats.produce_requests += 1
            if not entries:
                self.stats.empty_requests += 1
            keys = [(t, p) for t, p, _ in entries]
            if len(set(keys)) != len(keys):
                self.violations.append(f"two batches of one partition in one request: {keys}")
            if self.rng.random() < self.faults.leader_move:
                self._move_leader(self.rng.choice(sorted(self.leaders)))
            answer = {}
            for t, p, records in entries:
                self.stats.batches_sent += 1
                answer[(t, p)] = self._append(node, tid, t, p, records)
            throttle = 0
            if self.rng.random() < self.faults.throttle:
                throttle = self.rng.choice([50, 300, 2000])
                self.stats.count("throttle")
            return answer, throttle

    def _append(self, node: int, tid: str | None, t: str, p: int, records: bytes) -> int:
        (_, _, _, _, _, _, _, _, _, pid, epoch, seq, count) = _HEADER.unpack_from(records)
        if tid is not None and (t, p) not in self.in_txn:
            self.violations.append(f"Produce to {t}[{p}] before AddPartitionsToTxn")
        if t not in self.topics:  # deleted
            return UNKNOWN_TOPIC_OR_PARTITION
        if self.leaders[(t, p)] != node:
            self.stats.count("not_leader")
            return NOT_LEADER_OR_FOLLOWER
        n = self.attempts[(t, p, seq)] = self.attempts.get((t, p, seq), 0) + 1
        fault = self.scripted.get((t, p, seq, n))
        if fault == "cut_all":
            self.cut_pending = True
            fault = None
        elif fault == "denied":
            return TOPIC_AUTHORIZATION_FAILED
        elif fault == "refuse_and_forget":
            # Refused, and the broker loses every producer's state here (an unclean leader
            # election; state expiring with the log's head): it then takes any sequence.
            self.logs[(t, p)].clear()
            self.stats.count("state_lost")
            return NOT_ENOUGH_REPLICAS
        elif fault == "ok":
            fault = None
        elif fault is None:
            roll = self.rng.random()
            f = self.faults
            for name, prob in (("refuse", f.refuse), ("after_append", f.after_append),
                               ("timed_out", f.timed_out)):
                if roll < prob:
                    fault = name
                    break
                roll -= prob
        if fault == "refuse":
            self.stats.count("refuse")
            return NOT_ENOUGH_REPLICAS
        log = [b for b in self.logs[(t, p)] if b.producer_id == pid]
        mine = [b for b in log if b.epoch == epoch]
        for b in mine[-WINDOW:]:
            if b.first_seq == seq and b.count == count:
                self.stats.count("duplicate")
                if fault is None:
                    b.replicated = True
                    self._replicate_before(t, p, b)
                    return self.rng.choice([NONE, DUPLICATE_SEQUENCE_NUMBER])
                return NOT_ENOUGH_REPLICAS_AFTER_APPEND if fault == "after_append" \
                    else REQUEST_TIMED_OUT
        if mine and seq != mine[-1].last_seq + 1:
            self.stats.count("out_of_order")
            return OUT_OF_ORDER_SEQUENCE_NUMBER
        batch = LogBatch(pid, epoch, seq, count, records)
        self.logs[(t, p)].append(batch)
        if fault == "after_append":
            self.stats.count("after_append")
            return NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if fault == "timed_out":
            self.stats.count("timed_out")
            self.spend(self.request_timeout_s)
            return REQUEST_TIMED_OUT
        batch.replicated = True
        self._replicate_before(t, p, batch)
        return NONE

    def _replicate_before(self, t: str, p: int, batch: LogBatch) -> None:
        """A replicated batch: every batch before it in the log is replicated too (followers
        copy the log in order)."""
        for b in self.logs[(t, p)]:
            if b is batch:
                return
            b.replicated = True

    def _move_leader(self, key: tuple[str, int]) -> None:
        """Another replica takes over: the log loses a random part of its unreplicated tail."""
        old = self.leaders[key]
        self.leaders[key] = self.rng.choice([n for n in self.nodes if n != old])
        if self.rng.random() < self.faults.stale_metadata:
            self.stale[key] = old
        log = self.logs[key]
        tail = 0
        while tail < len(log) and not log[-1 - tail].replicated:
            tail += 1
        cut = self.rng.randint(0, tail)
        if cut:
            del log[len(log) - cut:]
            self.stats.count("truncated")
        self.stats.count("leader_move")

    # --------------------------------------------------------------- metadata

    def handle_metadata(self, node: int, body: bytes) -> bytes:
        """A Metadata request (v12) at ``node``: the brokers and the asked topics' leaders (a
        moved leader's old node while its metadata is stale), or a failure: the fault cuts the
        connection or leaves it unanswered until the attempt's timeout; a node in
        ``metadata_down`` cuts it (a broker restarting)."""
        with self.lock:
            self.metadata_requests[node] = self.metadata_requests.get(node, 0) + 1
            down = node in self.metadata_down
            if down or self.rng.random() < self.faults.metadata_fail:
                self.stats.count("metadata_fail")
                if not down and self.rng.random() < 0.5:
                    self.spend(ATTEMPT_TIMEOUT_S)
                    raise KafkaProtocolError(f"broker {node} did not answer Metadata in time")
                raise KafkaProtocolError(f"connection to broker {node} reset (Metadata)")
            r = Reader(body, True)
            names = []
            for _ in range(r.uvarint() - 1):
                r.int64()
                r.int64()
                names.append(r.string() or "")
                r.tags()
            topics = []
            for name in names:
                if name not in self.topics:
                    topics.append((name, UNKNOWN_TOPIC_OR_PARTITION, {}))
                    continue
                leaders = {}
                for p in range(self.topics[name]):
                    leader = self.leaders[(name, p)]
                    stale = self.stale.get((name, p))
                    if stale is not None:
                        if self.rng.random() < self.faults.stale_metadata:
                            leader = stale
                        else:
                            del self.stale[(name, p)]
                    leaders[p] = leader
                topics.append((name, NONE, leaders))
            return metadata_answer([(n, f"broker-{n}", 9092) for n in self.nodes], topics)

    # ------------------------------------------------------------ coordinator

    def handle_coordinator(self, api: int, body: bytes) -> bytes:
        with self.lock:
            r = Reader(body, True)
            if api == wire_producer.INIT_PRODUCER_ID:
                self.next_pid += 1
                return Writer(True).int32(0).int16(0).int64(self.next_pid).int16(0).tags().build()
            assert api == wire_producer.ADD_PARTITIONS_TO_TXN, api
            r.string()
            r.int64()
            r.int16()
            topics = []
            busy = self.rng.random() < self.faults.coordinator_busy
            code = 51 if busy else 0  # CONCURRENT_TRANSACTIONS
            if self.add_partitions_answers:
                code = self.add_partitions_answers.pop(0)
            for _ in range(r.uvarint() - 1):
                name = r.string() or ""
                parts = [r.int32() for _ in range(r.uvarint() - 1)]
                r.tags()
                topics.append((name, parts))
                if not code:
                    self.in_txn.update((name, p) for p in parts)
            if busy:
                self.stats.count("coordinator_busy")
            return (Writer(True).int32(0)
                    .array(topics, lambda w, tp: w.string(tp[0]).array(
                        tp[1], lambda ww, p: ww.int32(p).int16(code).tags()).tags())
                    .tags().build())

    def end_txn(self, commit: bool) -> int:
        """EndTxn (v<=4) as the coordinator answers it: INVALID_TXN_STATE while no partition was
        added (the transaction never started: state Empty), else the transaction ends."""
        with self.lock:
            n = self.outstanding()
            self.end_txn_calls.append((commit, n))
            if n:
                self.violations.append(f"EndTxn(commit={commit}) sent while {n} Produce "
                                       "request(s) were still in flight")
            if not self.in_txn:
                return INVALID_TXN_STATE
            self.in_txn.clear()
            return NONE

    # ------------------------------------------------------------------ checks

    def written(self, key: tuple[str, int]) -> list[bytes]:
        """The values of a partition's log, in order."""
        out = []
        for b in self.logs[key]:
            out += decode(b.records, 0, 1 << 62, read_committed=False).values.to_pylist()
        return out

    def sequences_ok(self, key: tuple[str, int]) -> bool:
        """The partition's batches carry sequences 0, 1, ... without a gap or a repeat."""
        nxt = 0
        for b in self.logs[key]:
            if b.first_seq != nxt:
                return False
            nxt = b.last_seq + 1
        return True


class SimConnection:
    """A producer's connection to one simulated broker (BrokerConnection's pipelining API)."""

    def __init__(self, cluster: SimCluster, node: int) -> None:
        self.cluster = cluster
        self.node = node
        self.host, self.port = f"broker-{node}", 9092
        self.pending: list[_Pending] = []
        self.closed = False
        self.muted_until = 0.0
        self._cid = 0
        self.login_expiring = False  # (no login: the simulation's sessions do not end)

    def throttle(self, throttle_ms: int) -> None:
        """(The sender keeps to the throttle itself, on the simulation's clock.)"""

    def connect_idle(self) -> "SimConnection":
        if self.closed:
            raise KafkaProtocolError("closed")
        return self

    def version_for(self, api: int, lo: int, hi: int) -> int:
        return hi

    def send_pipelined(self, api: int, version: int, body: list, *, flexible: bool,
                       deadline: float | None = None) -> int:
        c = self.cluster
        with c.lock:
            if self.closed:
                raise KafkaProtocolError(f"connection to broker {self.node} was closed")
            self._cid += 1
            self.pending.append(_Pending(self._cid, b"".join(bytes(x) for x in body), c.now()))
            if c.rng.random() < c.faults.cut_before:
                c.stats.count("cut_before")
                self._cut(handled=False)
                raise KafkaProtocolError(f"connection to broker {self.node} reset (sending)")
            return self._cid

    def receive_pipelined(self, cid: int, api: int, *, flexible: bool,
                          deadline: float | None = None) -> Reader:
        c = self.cluster
        delay = c.answer_delay_s.get(self.node, 0.0)
        if delay:
            time.sleep(delay)
        with c.lock:
            if self.closed or not self.pending:
                raise KafkaProtocolError(f"connection to broker {self.node} was closed")
            req = self.pending[0]
            assert req.cid == cid, (req.cid, cid)
            if c.rng.random() < c.faults.hang:
                c.stats.count("hang")
                c.spend(c.request_timeout_s + 5)
                self._cut(handled=None)
                raise KafkaProtocolError(f"broker {self.node} did not answer in time")
            c.spend(max(0.0, self.muted_until - c.now()) + 0.001)
            self.pending.pop(0)
            answer, throttle = c.handle_produce(self.node, req.body)
            if throttle:
                self.muted_until = c.now() + throttle / 1000
            if c.cut_pending:
                c.cut_pending = False
                self._cut(handled=True)
                raise KafkaProtocolError(f"connection to broker {self.node} reset (scripted)")
            if c.rng.random() < c.faults.cut_after:
                c.stats.count("cut_after")
                self._cut(handled=None)
                raise KafkaProtocolError(f"connection to broker {self.node} reset (answer lost)")
            return Reader(produce_answer(answer, throttle), True)

    def _cut(self, handled: bool | None) -> None:
        """The connection breaks: the broker handles each request it already read, or not
        (``handled`` None: drawn per request); their answers are lost."""
        c = self.cluster
        for req in self.pending:
            if handled or (handled is None and c.rng.random() < 0.5):
                c.handle_produce(self.node, req.body)
        self.pending.clear()
        self.closed = True

    def close(self) -> None:
        """The client closes it: requests it never read the answers of stay in flight."""
        self.closed = True


class _CoordinatorConnection:
    """The link's connection to the coordinator, or (``node`` set) to a broker for what any
    broker answers: Metadata, an idempotent producer's InitProducerId."""

    def __init__(self, cluster: SimCluster, node: int | None = None) -> None:
        self.cluster = cluster
        self.node = node
        self.host, self.port = (f"broker-{node}" if node else "coordinator"), 9092
        self.closed = False

    @property
    def connected(self) -> bool:
        return not self.closed

    @property
    def broken(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def throttle(self, throttle_ms: int) -> None:
        assert throttle_ms == 0  # (the simulated coordinator and Metadata never throttle)

    def version_for(self, api: int, lo: int, hi: int) -> int:
        return hi if api != wire_producer.INIT_PRODUCER_ID else 4

    def request(self, api: int, version: int, body: bytes, *, flexible: bool,
                deadline: float | None = None) -> Reader:
        if self.closed:
            raise KafkaProtocolError(f"connection to {self.host} was closed")
        if api == METADATA:
            assert self.node is not None and version == 12, (self.host, version)
            try:
                return Reader(self.cluster.handle_metadata(self.node, body), True)
            except KafkaProtocolError:
                self.closed = True  # as a real connection's stream breaks with its request
                raise
        c = self.cluster
        if api == wire_producer.ADD_PARTITIONS_TO_TXN and c.add_partitions_lost:
            if c.add_partitions_lost.pop(0):
                c.handle_coordinator(api, body)
            self.closed = True
            raise KafkaProtocolError(f"connection to {self.host} reset (answer lost)")
        return Reader(c.handle_coordinator(api, body), True)


def metadata_answer(brokers: list[tuple[int, str, int]],
                    topics: list[tuple[str, int, dict[int, int]]]) -> bytes:
    """A Metadata v12 answer: ``brokers`` (node, host, port); ``topics`` (name, error code,
    partition -> leader), each partition's replicas its leader alone."""

    def partition(w: Writer, pl: tuple[int, int]) -> None:
        w.int16(0).int32(pl[0]).int32(pl[1]).int32(0)
        for replicas in ([pl[1]], [pl[1]], []):  # replicas, in-sync replicas, offline replicas
            w.array(replicas, lambda ww, n: ww.int32(n))
        w.tags()

    def topic(w: Writer, t: tuple[str, int, dict[int, int]]) -> None:
        (w.int16(t[1]).string(t[0]).int64(0).int64(0).boolean(False)
         .array(sorted(t[2].items()), partition).int32(-2**31).tags())

    return (Writer(True).int32(0)
            .array(brokers, lambda w, b: w.int32(b[0]).string(b[1]).int32(b[2]).string(None)
                   .tags())
            .string("sim").int32(brokers[0][0]).array(topics, topic).tags().build())


def produce_answer(answer: dict[tuple[str, int], int], throttle_ms: int) -> bytes:
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (t, p), code in sorted(answer.items()):
        by_topic.setdefault(t, []).append((p, code))

    def part(w: Writer, pc: tuple[int, int]) -> None:
        (w.int32(pc[0]).int16(pc[1]).int64(-1 if pc[1] else 0).int64(-1).int64(0)
         .array([], lambda ww, x: None).string(None).tags())

    return (Writer(True).array(sorted(by_topic.items()),
                               lambda w, tp: w.string(tp[0]).array(tp[1], part).tags())
            .int32(throttle_ms).tags().build())


class _Coordinators:
    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster

    def coordinator(self, tid: str, refresh: bool = False) -> tuple[str, int]:
        return "coordinator", 9092

    def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool) -> int:
        return self.cluster.end_txn(commit)


class SimLink(wire_producer.ClusterLink):
    """The producer's ClusterLink (metadata, broker choice, retries: its own code) whose
    connections are the simulation's: Metadata and InitProducerId to a broker, the
    coordinator's requests, and each sender's Produce connection. On the cluster's clock."""

    def __init__(self, cluster: SimCluster, *, timeout_s: float = 5.0) -> None:
        servers = ",".join(f"broker-{n}:9092" for n in cluster.nodes)
        super().__init__({"bootstrap.servers": servers}, timeout_s=timeout_s)
        self.cluster = cluster
        if cluster.clock is not None:
            self.clock = cluster.clock
            self.sleep = cluster.clock.advance
        self.coordinators = _Coordinators(cluster)  # type: ignore[assignment]
        self._coordinator = _CoordinatorConnection(cluster)
        self._idle_conns: dict[int, list[SimConnection]] = {}

    def connection(self, host: str, port: int) -> _CoordinatorConnection:  # type: ignore[override]
        if host == "coordinator":
            if self._coordinator.closed:  # (dropped after an error: a new one)
                self._coordinator = _CoordinatorConnection(self.cluster)
            return self._coordinator
        with self._lock:
            conn = self._conns.get((host, port))
            if conn is None or conn.closed:
                node = int(host.removeprefix("broker-"))
                conn = self._conns[(host, port)] = _CoordinatorConnection(  # type: ignore
                    self.cluster, node)
        return conn  # type: ignore[return-value]

    def produce_connection(self, node: int) -> SimConnection:
        c = self.cluster
        with c.lock:
            if node not in c.nodes:
                raise KafkaProtocolError(f"broker {node} is not in the cluster's metadata")
            idle = self._idle_conns.get(node, [])
            while idle:
                conn = idle.pop()
                if not conn.closed:
                    return conn
            conn = SimConnection(c, node)
            c.conns.append(conn)
            return conn

    def release_produce_connection(self, conn: SimConnection, *, reusable: bool) -> None:
        with self.cluster.lock:
            if reusable and not conn.closed and not conn.pending:
                self._idle_conns.setdefault(conn.node, []).append(conn)
            else:
                conn.close()


class Stuck(AssertionError):
    """The producer waits for its senders, and none of them can act: a liveness defect."""


class StepRunner:
    """Runs a producer's senders in the calling thread: each step, one sender (drawn from the
    seed) sends its next request or reads its oldest answer; waits and back-offs move the
    virtual clock. The producer's own code decides everything else."""

    def __init__(self, rng: random.Random, clock: VirtualClock, *, receive_bias: float = 0.3,
                 max_steps: int = 200_000) -> None:
        self.rng = rng
        self._clock = clock
        self.receive_bias = receive_bias  # how often an answer is read before a send
        self.max_steps = max_steps
        self.steps = 0
        self.senders: list = []

    def clock(self) -> float:
        return self._clock.now

    def sleep(self, seconds: float) -> None:
        self._clock.advance(seconds)

    def start(self, sender) -> None:
        self.senders.append(sender)

    def step(self) -> bool:
        """One sender's step; False when no sender can act (all idle or done)."""
        self.steps += 1
        if self.steps > self.max_steps:
            raise Stuck(f"more than {self.max_steps} sender steps: a livelock")
        live = [s for s in self.senders if not s.done]
        self.rng.shuffle(live)
        throttled = []
        for s in live:
            with s.producer._cv:
                if s.inflight and self.rng.random() < self.receive_bias:
                    kind, arg = "receive", None
                else:
                    kind, arg = s.choose()
            if kind == "done":
                s.finish()
            elif kind == "wait":
                if arg:
                    throttled.append(arg)
            else:
                s.act(kind, arg)
                return True
        if throttled:
            self._clock.advance(min(throttled))
            return True
        return False

    def pump(self, n: int) -> None:
        for _ in range(n):
            if not self.step():
                return

    def wait(self, cv, timeout: float) -> None:
        if not self.step():
            raise Stuck("the producer waits for its senders, and none can act")

    def join(self, senders: list, timeout: float) -> None:
        while not all(s.done for s in senders):
            if not self.step() and not all(s.done for s in senders):
                raise Stuck("stopping: a sender neither finishes nor acts")
