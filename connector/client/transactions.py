"""The transaction protocol client: find coordinators, describe, list and end transactions.

Why: Kafka's transaction coordinator accepts EndTxn from any connection; it checks only the
transactional id, producer id, epoch and state. This lets the driver commit transactions that the
executors opened and pre-committed. EndTxn is sent at version <= 4: librdkafka opens pre-KIP-890
transactions and v5 belongs to the new protocol.
"""

from __future__ import annotations

import contextvars
import functools
import random
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, TypeVar, cast

from . import connection as broker_connection
from .connection import (
    ApiRange,
    BrokerConnection,
    SecurityConfig,
    current_deadline,
    deadline_scope,
    split_host_port,
)
from .metadata import METADATA_API, request_metadata
from ..errors import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaProtocolError,
    TransactionError,
)
from .error_codes import (
    CLUSTER_AUTHORIZATION_FAILED,
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    NONE,
    NOT_COORDINATOR,
    PRODUCER_FENCED,
    REQUEST_TIMED_OUT,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_NOT_FOUND,
    error_name,
)
from .protocol import Reader, Writer

FIND_COORDINATOR = 10
END_TXN = 26
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
# The versions this client sends. EndTxn stays at v4 or below: both producers open pre-KIP-890
# transactions, and v5 belongs to the new protocol.
FIND_COORDINATOR_API = ApiRange(FIND_COORDINATOR, "FindCoordinator", 4, 4)  # batched (KIP-699)
DESCRIBE_TRANSACTIONS_API = ApiRange(DESCRIBE_TRANSACTIONS, "DescribeTransactions", 0, 0)
LIST_TRANSACTIONS_API = ApiRange(LIST_TRANSACTIONS, "ListTransactions", 0, 0)
END_TXN_API = ApiRange(END_TXN, "EndTxn", 0, 4)
# What the driver's commit client sends (Kafka 3.0+ offers all of them).
COMMIT_CLIENT_APIS = (METADATA_API, FIND_COORDINATOR_API, DESCRIBE_TRANSACTIONS_API,
                      LIST_TRANSACTIONS_API, END_TXN_API)

KEY_TYPE_TRANSACTION = 1

_RETRIABLE = {
    COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, REQUEST_TIMED_OUT,
    CONCURRENT_TRANSACTIONS,
}
BROKER_LIST_MAX_AGE_S = 30.0
# Coordinators kept, the least recently used forgotten first: every run of a query (its run tag)
# and every batch write (its sink id) brings new transactional ids, and a driver's or worker's
# client lives as long as its process. Far more than one batch's ids (partitions x 2 parities);
# a forgotten one costs a FindCoordinator.
COORDINATORS_KEPT = 8192
_COORDINATOR_MOVED = {COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
# EndTxn answers meaning "the epoch moved on": the coordinator aborted the transaction (timeout) or
# a newer producer of the id fenced it. Either way it did not commit.
FENCED_CODES = {INVALID_PRODUCER_EPOCH, PRODUCER_FENCED}
# EndTxn answers meaning "the coordinator has no state for this id" (it expired after
# transactional.id.expiration.ms, or was deleted): whether an earlier commit landed is unknowable.
UNKNOWN_ID_CODES = {INVALID_PRODUCER_ID_MAPPING, TRANSACTIONAL_ID_NOT_FOUND}
# ListTransactions answers worth asking again: the broker is still loading or moving coordinators.
_LIST_RETRIABLE = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE}


_F = TypeVar("_F", bound=Callable[..., Any])


def _within_timeout(method: _F) -> _F:
    """Run a public call within the client's timeout, or within its caller's if that ends first.

    Why: calls nest (describe -> find_coordinators, end_many -> end_txn); one shared deadline keeps
    the whole call within ``timeout`` instead of a fresh budget per level.
    """

    @functools.wraps(method)
    def bounded(self: "TransactionClient", *args: Any, **kwargs: Any) -> Any:
        with deadline_scope(self.timeout):
            return method(self, *args, **kwargs)

    return cast(_F, bounded)


def _in_thread(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn run in a copy of the caller's context: a pool thread keeps the caller's deadline."""
    return functools.partial(contextvars.copy_context().run, fn)


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    error_code: int
    state: str
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: dict[str, list[int]] = field(default_factory=dict)

    @property
    def ongoing(self) -> bool:
        return self.state == "Ongoing"

    def deadline_ms(self) -> int | None:
        """Wall-clock time (ms) at which the coordinator will abort this transaction."""
        if self.start_time_ms < 0:
            return None
        return self.start_time_ms + self.timeout_ms


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


class TransactionClient:
    """A driver-side client for the coordinator APIs, safe to share between threads.

    ``kafka_config`` is the librdkafka-style config (``bootstrap.servers`` and security settings).
    Every call is bounded by ``timeout`` seconds including retries; one socket operation by
    ``min(timeout, ATTEMPT_TIMEOUT_S)``, so an unresponsive broker leaves time to try others.
    ``security``: the settings already read from ``kafka_config`` (one OAUTHBEARER token source
    for a client sharing another's). Connections go through :meth:`_conn`, :meth:`_drop` and
    :meth:`_any_broker`: a producer's link (``ClusterLink``) lends its own instead.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, object],
        *,
        timeout: float = 30.0,
        client_id: str | None = None,
        security: SecurityConfig | None = None,
    ) -> None:
        servers = str(kafka_config.get("bootstrap.servers") or "")
        if not servers:
            raise KafkaProtocolError("kafka.bootstrap.servers is empty")
        self.bootstrap = [split_host_port(s) for s in servers.split(",") if s.strip()]
        self.security = security or SecurityConfig.from_kafka_config(kafka_config)
        self.timeout = timeout
        # kafka.client.id, as every client of the query: quotas by client id cover this one too.
        self.client_id = client_id or str(kafka_config.get("client.id") or "txkafka-committer")
        self._conns: dict[tuple[str, int], BrokerConnection] = {}
        self._coordinators: OrderedDict[str, tuple[str, int]] = OrderedDict()  # LRU, bounded
        # Brokers seen since start (coordinators, metadata): asked when the bootstrap ones are down.
        self._known: dict[tuple[str, int], None] = {}
        # The last Metadata answer's brokers and when it came: the sweep after every batch
        # lists transactions on each broker without a Metadata round trip of its own.
        self._live: tuple[float, list[tuple[int, str, int]]] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        hosts = ",".join(f"{h}:{p}" for h, p in self.bootstrap)
        return f"TransactionClient({hosts}, {self.security.protocol})"

    def close(self) -> None:
        with self._lock:
            conns = list(self._conns.values())
            self._conns.clear()
        for c in conns:
            c.close()

    def __enter__(self) -> "TransactionClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ connections

    def _conn(self, host: str, port: int) -> BrokerConnection:
        key = (host, port)
        with self._lock:
            conn = self._conns.get(key)
            if conn is None:
                attempt = min(self.timeout, broker_connection.ATTEMPT_TIMEOUT_S)
                conn = BrokerConnection(host, port, self.security, timeout=attempt,
                                        client_id=self.client_id)
                self._conns[key] = conn
        return conn.connect()

    def _drop(self, conn: BrokerConnection) -> None:
        """Close ``conn``, whose request failed, if that broke it (:attr:`BrokerConnection.broken`),
        and take it out of the pool if the pool still holds it.

        Why: threads share pooled connections; one whose request failed on an old connection
        must not close the fresh one another thread already opened.
        """
        if not conn.broken:
            return
        key = (conn.host, conn.port)
        with self._lock:
            if self._conns.get(key) is conn:
                del self._conns[key]
        conn.close()

    def _remember(self, addresses: Iterable[tuple[str, int]]) -> None:
        with self._lock:
            for a in addresses:
                self._known[a] = None

    def _any_broker(self) -> BrokerConnection:
        """A connection to any broker: connected ones first, then bootstrap, then brokers seen.

        Why: a bootstrap broker that restarts or drops packets must not stop coordinator lookups
        while other brokers answer.
        """
        with self._lock:
            seen = [a for a in self._known if a not in self.bootstrap]
            live = {a for a, c in self._conns.items() if c.connected}
        hosts = list(self.bootstrap)
        random.shuffle(hosts)
        random.shuffle(seen)
        hosts = sorted(hosts + seen, key=lambda a: a not in live)  # stable: live ones first
        errors = []
        for host, port in hosts:
            try:
                return self._conn(host, port)
            except KafkaAuthenticationError:
                raise  # the same credentials fail on every broker: say so at once
            except KafkaProtocolError as e:
                errors.append(str(e))
        raise KafkaProtocolError("no broker answered (bootstrap servers, then brokers seen "
                                 "since): " + "; ".join(errors))

    def _deadline(self) -> float:
        d = current_deadline()
        return d if d is not None else time.monotonic() + self.timeout

    @staticmethod
    def _pause(error: Exception, deadline: float, backoff: float) -> None:
        """Sleep before a retry, or raise ``error`` when the deadline leaves no time for one."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise error
        time.sleep(min(backoff, remaining))
        if time.monotonic() >= deadline:
            raise error

    @_within_timeout
    def api_versions(self, host: str, port: int) -> dict[int, tuple[int, int]]:
        """{API key: (min, max) version} that a broker announced when this client connected."""
        return dict(self._conn(host, port).api_versions)

    @_within_timeout
    def brokers(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every live broker, from a Metadata request; asked again (a
        stale pooled connection dropped, another broker tried) until the client's timeout."""
        deadline = self._deadline()
        backoff = 0.05
        while True:
            try:
                found = self._brokers_once()
                break
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError as e:
                self._pause(e, deadline, backoff)  # every broker down (a restart): wait for one
                backoff = min(backoff * 2, 1.0)
        self._remember((host, port) for _, host, port in found)
        self._live = (time.monotonic(), found)
        return found

    def _recent_brokers(self) -> list[tuple[int, str, int]]:
        """The brokers of a Metadata answer at most BROKER_LIST_MAX_AGE_S old, else fresh ones.
        A broker that died since fails its request and the caller asks afresh; one added since
        is asked within that age (its share of the sweeps waits at most that long)."""
        live = self._live
        if live is not None and time.monotonic() - live[0] < BROKER_LIST_MAX_AGE_S:
            return live[1]
        return self.brokers()

    def _brokers_once(self) -> list[tuple[int, str, int]]:
        conn = self._any_broker()
        try:
            md = request_metadata(conn, [])
        except KafkaProtocolError:
            self._drop(conn)
            raise
        return [(node, host, port) for node, (host, port) in md.brokers.items()]

    # ----------------------------------------------------------- coordinators

    def coordinator(self, transactional_id: str, refresh: bool = False) -> tuple[str, int]:
        if not refresh:
            hit = self._known_coordinators([transactional_id], look_up=False)
            if hit:
                return hit[transactional_id]
        found = self.find_coordinators([transactional_id])
        return found[transactional_id]

    def _known_coordinators(self, transactional_ids: Iterable[str],
                            look_up: bool = True) -> dict[str, tuple[str, int]]:
        """Each id's coordinator, from the cache where known, else (``look_up``) one batched
        FindCoordinator. A cached coordinator that moved answers NOT_COORDINATOR (or no longer
        answers); callers forget those ids and look them up again, so a batch's commit pays no
        FindCoordinator round trip while the coordinators stay where they were."""
        ids = set(transactional_ids)
        with self._lock:
            known = {t: self._coordinators[t] for t in ids if t in self._coordinators}
            for t in known:
                self._coordinators.move_to_end(t)  # in use: forgotten last
        missing = ids - known.keys()
        if missing and look_up:
            known.update(self.find_coordinators(missing))
        return known

    def _keep_coordinators(self, found: Mapping[str, tuple[str, int]]) -> None:
        """Remember coordinators found, forgetting the least recently used beyond
        COORDINATORS_KEPT."""
        with self._lock:
            for tid, addr in found.items():
                self._coordinators[tid] = addr
                self._coordinators.move_to_end(tid)
            while len(self._coordinators) > COORDINATORS_KEPT:
                self._coordinators.popitem(last=False)

    def _forget_coordinators(self, transactional_ids: Iterable[str]) -> None:
        with self._lock:
            for tid in transactional_ids:
                self._coordinators.pop(tid, None)

    @_within_timeout
    def find_coordinators(self, transactional_ids: Iterable[str]) -> dict[str, tuple[str, int]]:
        """Batched FindCoordinator (v4+, KIP-699), retried while coordinators load or brokers
        restart (every known broker is tried, until the deadline).

        At the deadline: KafkaProtocolError when no broker answered, TransactionError without a
        code when coordinators still answered "retry" (a final answer's error carries its code):
        callers with a longer budget of their own ask again."""
        pending = sorted(set(transactional_ids))
        found: dict[str, tuple[str, int]] = {}
        deadline = self._deadline()
        backoff = 0.05
        while pending:
            try:
                conn = self._any_broker()
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError as e:
                self._pause(e, deadline, backoff)  # every broker down (a restart): wait for one
                backoff = min(backoff * 2, 1.0)
                continue
            v = conn.version_for(*FIND_COORDINATOR_API.spec)
            body = (Writer(True).int8(KEY_TYPE_TRANSACTION)
                    .array(pending, lambda ww, k: ww.string(k)).tags().build())
            try:
                r = conn.request(FIND_COORDINATOR, v, body, flexible=True)
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError as e:
                # A pooled connection to a broker that died or restarted: drop it, ask another.
                self._drop(conn)
                self._pause(e, deadline, backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            conn.throttle(r.int32())
            retry = []

            def coord(rr: Reader) -> None:
                key = rr.string() or ""
                rr.int32()  # node id
                host, port, err = rr.string() or "", rr.int32(), rr.int16()
                msg = rr.string()
                rr.tags()
                if err == NONE:
                    found[key] = (host, port)
                elif err in _RETRIABLE:
                    retry.append(key)
                elif err == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                    raise KafkaAuthorizationError(
                        f"not authorized for transactional id {key!r}: the principal needs "
                        f"DESCRIBE (and WRITE to commit) on TransactionalId {key!r}"
                    )
                else:
                    raise TransactionError(
                        f"FindCoordinator for transactional id {key!r}: {error_name(err)} {msg or ''}",
                        err,
                    )

            r.array(coord)
            pending = retry
            if pending:
                self._pause(TransactionError(
                    f"no transaction coordinator for {pending[:3]} within {self.timeout:.0f}s"
                ), deadline, backoff)
                backoff = min(backoff * 2, 1.0)
        self._keep_coordinators(found)
        self._remember(found.values())
        return found

    # ---------------------------------------------------------------- describe

    @_within_timeout
    def describe(self, transactional_ids: Iterable[str],
                 fresh: bool = False) -> dict[str, TransactionDescription]:
        """DescribeTransactions for each id, grouped per coordinator, retried while loading.
        ``fresh``: look the coordinators up again first, not from what an earlier call found."""
        ids = sorted(set(transactional_ids))
        if fresh:
            self._forget_coordinators(ids)
        out: dict[str, TransactionDescription] = {}
        deadline = self._deadline()
        backoff = 0.05
        while ids:
            coords = self._known_coordinators(ids)
            by_coord: dict[tuple[str, int], list[str]] = {}
            for tid in ids:
                by_coord.setdefault(coords[tid], []).append(tid)
            retry: list[str] = []
            for (host, port), group in by_coord.items():
                try:
                    descs = self._describe_at(host, port, group)
                except KafkaAuthenticationError:
                    raise  # not retriable: TLS or SASL refused us
                except KafkaProtocolError:
                    retry.extend(group)  # _describe_at dropped the broken connection
                    continue
                for d in descs:
                    if d.error_code in _RETRIABLE:
                        retry.append(d.transactional_id)
                    elif d.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                        raise KafkaAuthorizationError(
                            f"not authorized to describe transactional id {d.transactional_id!r}: "
                            f"the principal needs DESCRIBE on TransactionalId {d.transactional_id!r}"
                        )
                    else:
                        out[d.transactional_id] = d
            ids = sorted(set(retry))
            if ids:
                self._forget_coordinators(ids)
                self._pause(TransactionError(f"DescribeTransactions did not settle for {ids[:3]}"),
                            deadline, backoff)
                backoff = min(backoff * 2, 1.0)
        return out

    def _describe_at(self, host: str, port: int, ids: list[str]) -> list[TransactionDescription]:
        conn = self._conn(host, port)
        v = conn.version_for(*DESCRIBE_TRANSACTIONS_API.spec)
        body = Writer(True).array(ids, lambda ww, k: ww.string(k)).tags().build()
        try:
            r = conn.request(DESCRIBE_TRANSACTIONS, v, body, flexible=True)
        except KafkaProtocolError as e:
            if not isinstance(e, KafkaAuthenticationError):
                self._drop(conn)
            raise
        conn.throttle(r.int32())

        def topic(rr: Reader) -> tuple[str, list[int]]:
            name = rr.string() or ""
            parts = rr.array(lambda x: x.int32())
            rr.tags()
            return name, parts

        def state(rr: Reader) -> TransactionDescription:
            err = rr.int16()
            tid = rr.string() or ""
            st = rr.string() or ""
            timeout_ms = rr.int32()
            start = rr.int64()
            pid = rr.int64()
            epoch = rr.int16()
            parts = dict(rr.array(topic))
            rr.tags()
            return TransactionDescription(tid, err, st, timeout_ms, start, pid, epoch, parts)

        return r.array(state)

    # -------------------------------------------------------------------- list

    @_within_timeout
    def list_transactions(
        self,
        *,
        prefix: str | None = None,
        states: Iterable[str] = (),
    ) -> list[TransactionListing]:
        """ListTransactions on every broker (each coordinates a share of the ids).

        Retried with fresh metadata until the client's timeout when a broker does not answer (a
        broker that just died stays in the metadata until the controller notices) or answers that
        its coordinators are still loading or moving (a broker that just started or failed over).
        """
        deadline = self._deadline()
        backoff = 0.1
        while True:
            try:
                return self._list_transactions_once(prefix, list(states))
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError as e:
                self._live = None  # a broker went away: ask for the brokers afresh
                self._pause(e, deadline, 0.5)
            except TransactionError as e:
                if e.code not in _LIST_RETRIABLE:
                    raise
                self._live = None
                self._pause(TransactionError(
                    f"{e} (still after retrying for {self.timeout:.0f}s: the broker's "
                    "transaction coordinator did not finish loading; check the broker's log "
                    "and the __transaction_state topic)", e.code), deadline, backoff)
                backoff = min(backoff * 2, 1.0)

    def _list_transactions_once(self, prefix: str | None,
                                states: list[str]) -> list[TransactionListing]:
        result: list[TransactionListing] = []
        body = (Writer(True).array(states, lambda ww, s: ww.string(s))
                .array([], lambda ww, p: ww.int64(p)).tags().build())
        for _node, host, port in self._recent_brokers():
            conn = None
            try:
                conn = self._conn(host, port)
                r = conn.request(LIST_TRANSACTIONS, conn.version_for(*LIST_TRANSACTIONS_API.spec),
                                 body, flexible=True)
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError:
                if conn is not None:
                    self._drop(conn)
                conn = self._conn(host, port)
                r = conn.request(LIST_TRANSACTIONS, conn.version_for(*LIST_TRANSACTIONS_API.spec),
                                 body, flexible=True)
            conn.throttle(r.int32())
            err = r.int16()
            if err == CLUSTER_AUTHORIZATION_FAILED:
                raise KafkaAuthorizationError(
                    "ListTransactions needs DESCRIBE on the cluster or on the sink's transactional ids"
                )
            if err:
                raise TransactionError(f"ListTransactions at {host}:{port}: {error_name(err)}", err)
            r.array(lambda rr: rr.string())  # unknown state filters

            def listing(rr: Reader) -> TransactionListing:
                tid = rr.string() or ""
                pid = rr.int64()
                st = rr.string() or ""
                rr.tags()
                return TransactionListing(tid, pid, st)

            for item in r.array(listing):
                if prefix is None or item.transactional_id.startswith(prefix):
                    result.append(item)
        return sorted(result, key=lambda t: t.transactional_id)

    # -------------------------------------------------------------------- end

    @_within_timeout
    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool) -> int:
        """Send EndTxn; retry retriable answers; return the final error code (0 on success).

        Non-retriable answers are returned, not raised: the caller decides what INVALID_TXN_STATE or
        PRODUCER_FENCED mean for its batch. A coordinator or bootstrap broker that does not answer
        counts as COORDINATOR_NOT_AVAILABLE: looked up again until the deadline.
        """
        deadline = self._deadline()
        backoff = 0.02
        refresh = False
        while True:
            err = self._end_txn_once(transactional_id, producer_id, producer_epoch, commit, refresh)
            if err == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                raise KafkaAuthorizationError(
                    f"not authorized to end transaction {transactional_id!r}: the principal needs "
                    f"WRITE on TransactionalId {transactional_id!r}"
                )
            remaining = deadline - time.monotonic()
            if err not in _RETRIABLE or remaining <= 0:
                return err
            refresh = err in _COORDINATOR_MOVED
            time.sleep(min(backoff, remaining))
            if time.monotonic() >= deadline:
                return err
            backoff = min(backoff * 2, 0.5)

    def _end_txn_once(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool, refresh: bool) -> int:
        try:
            host, port = self.coordinator(transactional_id, refresh=refresh)
            conn = self._conn(host, port)
        except KafkaAuthenticationError:
            raise  # not retriable: TLS or SASL refused us
        except KafkaProtocolError:
            return COORDINATOR_NOT_AVAILABLE  # no broker answers (a restart): look up again
        v = conn.version_for(*END_TXN_API.spec)
        flexible = v >= 3
        body = (Writer(flexible).string(transactional_id).int64(producer_id)
                .int16(producer_epoch).boolean(commit).tags().build())
        try:
            r = conn.request(END_TXN, v, body, flexible=flexible)
        except KafkaAuthenticationError:
            raise
        except KafkaProtocolError:
            self._drop(conn)
            return COORDINATOR_NOT_AVAILABLE
        conn.throttle(r.int32())
        return r.int16()

    @_within_timeout
    def end_many(
        self,
        txns: Iterable[tuple[str, int, int]],
        commit: bool,
        parallelism: int = 8,
    ) -> dict[str, int]:
        """EndTxn for many (id, producer id, epoch); returns id -> final error code.

        First pass: one pipelined write per coordinator (one network round trip per broker; the
        broker still handles them one after another). Anything that answers retriably, or whose
        connection broke, is then retried one by one (``parallelism`` at a time) until the
        client's timeout, which both passes share.
        """
        items = list(txns)
        if not items:
            return {}
        coords = self._known_coordinators(t[0] for t in items)
        groups: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
        for t in items:
            groups.setdefault(coords[t[0]], []).append(t)
        codes: dict[str, int] = {}

        def pipelined(addr: tuple[str, int], group: list[tuple[str, int, int]]) -> None:
            conn = None
            try:
                conn = self._conn(*addr)
                v = conn.version_for(*END_TXN_API.spec)
                flexible = v >= 3
                reqs = [(END_TXN, v, Writer(flexible).string(tid).int64(pid).int16(ep)
                         .boolean(commit).tags().build(), flexible) for tid, pid, ep in group]
                for (tid, _, _), r in zip(group, conn.request_many(reqs)):
                    conn.throttle(r.int32())
                    codes[tid] = r.int16()
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError:
                if conn is not None:
                    self._drop(conn)  # the retry pass reconnects

        if len(groups) == 1:
            pipelined(*next(iter(groups.items())))
        else:
            with ThreadPoolExecutor(max_workers=min(parallelism, len(groups))) as pool:
                for f in [pool.submit(_in_thread(pipelined), a, g) for a, g in groups.items()]:
                    f.result()
        for tid, code in codes.items():
            if code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                raise KafkaAuthorizationError(
                    f"not authorized to end transaction {tid!r}: the principal needs WRITE on "
                    f"TransactionalId {tid!r}"
                )
        again = [t for t in items if codes.get(t[0], COORDINATOR_NOT_AVAILABLE) in _RETRIABLE]
        if again:
            # Looked up afresh: a coordinator that moved, or a connection that broke.
            self._forget_coordinators(t[0] for t in again
                                      if codes.get(t[0], COORDINATOR_NOT_AVAILABLE)
                                      in _COORDINATOR_MOVED)
            with ThreadPoolExecutor(max_workers=min(parallelism, len(again))) as pool:
                futs = {t[0]: pool.submit(_in_thread(self.end_txn), t[0], t[1], t[2], commit)
                        for t in again}
                codes.update({tid: f.result() for tid, f in futs.items()})
        return codes
