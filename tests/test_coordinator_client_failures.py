"""The coordinator client under broker failures: shared connections, restarts, TLS drops, timeouts.

Why: the driver commits a batch through one TransactionClient whose connections are shared by
threads (end_many's retry pass). A broker that restarts, resets a TLS handshake or drops packets
must cost a retry within the commit budget, never an AttributeError, a wrong "needs Kafka 3.0",
an authentication error or the whole budget. A fake broker on 127.0.0.1 plays the broker's part.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
import time
from typing import Callable

import pytest

from tests.tls_certs import self_signed
from txkafka.connector.client import (
    connection as broker_connection,
    transactions as transaction_client,
)
from txkafka.connector.client.connection import BrokerConnection, SecurityConfig
from txkafka.connector.client.connection import scram_client_final as real_scram_client_final
from txkafka.connector.errors import (
    KafkaAuthenticationError,
    KafkaProtocolError,
    TransactionError,
)
from txkafka.connector.client.error_codes import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
)
from txkafka.connector.client.protocol import Reader, Writer
from txkafka.connector.client.transactions import TransactionClient

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
FIND_COORDINATOR, END_TXN, DESCRIBE_TRANSACTIONS = 10, 26, 65
# (api key, min, max) the fake offers, and whether the version the client picks is flexible.
OFFERED = [(18, 0, 3), (17, 0, 1), (36, 0, 2), (10, 0, 4), (26, 0, 4), (65, 0, 0), (3, 0, 12),
           (22, 0, 4)]
FLEXIBLE = {18: True, 17: False, 36: True, 10: True, 26: True, 65: True, 3: True, 22: True,
            0: True, 24: True}  # (Produce v9+ and AddPartitionsToTxn v3, when a test offers them)
METADATA = 3
LOADING, CONCURRENT = COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS


class Hangup(Exception):
    """Raised by a handler: the fake closes the connection instead of answering."""


# ----------------------------------------------------------------------------- fake broker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeBroker:
    """Just enough of a Kafka broker: ApiVersions, SASL (PLAIN, SCRAM), FindCoordinator, EndTxn,
    DescribeTransactions, Metadata; InitProducerId when a test adds its handler.
    ``handlers[api_key](conn_no, body) -> response body`` may be replaced. ``session_ms``: the
    SASL session's lifetime it announces (KIP-368's connections.max.reauth.ms); a request after
    it ends closes the connection unanswered, as Kafka does, and is counted in ``expired``."""

    def __init__(self, port: int = 0, *, sasl_password: str | None = None,
                 tls: ssl.SSLContext | None = None, api_versions_delay: float = 0.0,
                 offered: list[tuple[int, int, int]] | None = None, session_ms: int = 0) -> None:
        self.sasl_password = sasl_password
        self.session_ms = session_ms
        self.expired: list[int] = []  # connection numbers closed at a request after the session
        self.tls = tls
        self.api_versions_delay = api_versions_delay
        self.offered = OFFERED if offered is None else offered  # what ApiVersions announces
        self.coordinator: tuple[str, int] | None = None  # None: this broker itself
        self.log: list[tuple[int, int, bool]] = []  # (connection number, api key, authenticated)
        self.client_ids: set[str] = set()  # of every request's header
        self.handlers: dict[int, Callable[[int, Reader], bytes]] = {
            FIND_COORDINATOR: self.find_coordinator,
            END_TXN: lambda n, body: end_txn_answer(0),
            DESCRIBE_TRANSACTIONS: lambda n, body: describe_answer(body, 0),
            METADATA: lambda n, body: metadata_answer(self.port),
        }
        self._srv = socket.socket()
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind(("127.0.0.1", port))
        self._srv.listen(16)
        self.port = self._srv.getsockname()[1]
        self._socks: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        """Stop like a dead broker: shutdown() wakes the threads blocked in accept() and recv()."""
        self._closed = True
        for s in [self._srv, *self._socks]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def find_coordinator(self, n: int, body: Reader) -> bytes:
        body.int8()
        keys = body.array(lambda r: r.string())
        host, port = self.coordinator or ("127.0.0.1", self.port)

        def one(w: Writer, key: str) -> None:
            w.string(key).int32(1).string(host).int32(port).int16(0).string(None).tags()

        return Writer(True).int32(0).array(keys, one).tags().build()

    def _accept(self) -> None:
        n = 0
        while not self._closed:
            try:
                sock, _ = self._srv.accept()
            except OSError:
                return
            n += 1
            self._socks.append(sock)
            threading.Thread(target=self._serve, args=(sock, n), daemon=True).start()

    def _serve(self, sock: socket.socket, n: int) -> None:
        with contextlib.suppress(OSError, Hangup, EOFError, ssl.SSLError):
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_side=True)
                self._socks.append(sock)
            authenticated = self.sasl_password is None
            session_ends: float | None = None
            scram: dict[str, str] = {}
            while True:
                frame = _recv(sock, struct.unpack(">i", _recv(sock, 4))[0])
                key, version, cid = struct.unpack(">hhi", frame[:8])
                client_id_len = struct.unpack(">h", frame[8:10])[0]
                self.client_ids.add(frame[10:10 + max(client_id_len, 0)].decode())
                body = Reader(frame[10 + max(client_id_len, 0) + (1 if FLEXIBLE[key] else 0):],
                              FLEXIBLE[key])
                self.log.append((n, key, authenticated))
                flexible_header = FLEXIBLE[key] and key != API_VERSIONS
                if key == API_VERSIONS:
                    time.sleep(self.api_versions_delay)
                    out = api_versions_answer(self.offered)
                elif key == SASL_HANDSHAKE:
                    out = Writer(False).int16(0).array(["PLAIN", "SCRAM-SHA-256"],
                                                       lambda w, m: w.string(m)).build()
                elif key == SASL_AUTHENTICATE:
                    out, authenticated = self._sasl(body.bytes_() or b"", scram)
                    if authenticated and self.session_ms:
                        session_ends = time.monotonic() + self.session_ms / 1000
                elif not authenticated:
                    raise Hangup  # what Kafka does with a request before the SASL login
                elif session_ends is not None and time.monotonic() > session_ends:
                    self.expired.append(n)
                    raise Hangup
                else:
                    out = self.handlers[key](n, body)
                head = struct.pack(">i", cid) + (b"\x00" if flexible_header else b"")
                sock.sendall(struct.pack(">i", len(head) + len(out)) + head + out)
        with contextlib.suppress(OSError):
            sock.close()

    def _sasl(self, payload: bytes, scram: dict[str, str]) -> tuple[bytes, bool]:
        text = payload.decode()
        done = False
        if text.startswith("\0"):  # PLAIN
            reply, done = "", True
        elif text.startswith("n,,"):  # SCRAM client-first
            scram["bare"] = text[3:]
            nonce = scram["bare"].split("r=", 1)[1]
            scram["server_first"] = reply = f"r={nonce}srv,s=c2FsdA==,i=4096"
        else:  # SCRAM client-final: answer the signature the client expects
            _, reply = real_scram_client_final("SCRAM-SHA-256", self.sasl_password or "",
                                               scram["bare"], scram["server_first"])
            done = True
        out = (Writer(True).int16(0).string(None).bytes_(reply.encode())
               .int64(self.session_ms if done else 0).tags().build())
        return out, done


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def api_versions_answer(offered: list[tuple[int, int, int]] = OFFERED) -> bytes:
    return (Writer(True).int16(0)
            .array(offered, lambda w, t: w.int16(t[0]).int16(t[1]).int16(t[2]).tags())
            .int32(0).tags().build())


def end_txn_answer(code: int) -> bytes:
    return Writer(True).int32(0).int16(code).tags().build()


def metadata_answer(port: int) -> bytes:
    """Metadata v12: this broker alone (node 1), no topics."""
    return (Writer(True).int32(0)
            .array([(1, "127.0.0.1", port)], lambda w, b: w.int32(b[0]).string(b[1]).int32(b[2])
                   .string(None).tags())
            .string("cluster").int32(1).array([], lambda w, t: None).tags().build())


def describe_answer(body: Reader, code: int) -> bytes:
    ids = body.array(lambda r: r.string())

    def one(w: Writer, tid: str) -> None:
        (w.int16(code).string(tid).string("Ongoing").int32(60000).int64(0).int64(7).int16(0)
         .array([], lambda ww, t: None).tags())

    return Writer(True).int32(0).array(ids, one).tags().build()


@pytest.fixture
def brokers():
    started: list[FakeBroker] = []

    def start(*args, **kwargs) -> FakeBroker:
        b = FakeBroker(*args, **kwargs)
        started.append(b)
        return b

    yield start
    for b in started:
        b.close()


def _later(seconds: float, fn: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(seconds), fn()), daemon=True)
    t.start()
    return t


def _run_threads(n: int, fn: Callable[[int], object]) -> list[object]:
    """Run fn(i) in n threads at once; each result is its return value or its exception."""
    results: list[object] = [None] * n
    gate = threading.Barrier(n)

    def run(i: int) -> None:
        gate.wait()
        try:
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def _end_txn_on(conn: BrokerConnection, tid: str) -> int:
    body = Writer(True).string(tid).int64(7).int16(0).boolean(True).tags().build()
    r = conn.request(END_TXN, 4, body, flexible=True)
    r.int32()
    return r.int16()


# ------------------------------------------------------ 1. threads sharing one connection


def test_correlation_ids_wrap_within_int32(brokers):
    """A pooled connection lives as long as its worker: after 2**31 - 1 requests its correlation
    id wraps to 0, as the Java client's and librdkafka's do. (It was packed as 2**31:
    struct.error, on every later request too.)"""
    broker = brokers()
    conn = BrokerConnection("127.0.0.1", broker.port, SecurityConfig()).connect()
    conn._correlation = 2**31 - 1
    assert [_end_txn_on(conn, "t"), _end_txn_on(conn, "t")] == [0, 0]
    assert conn._correlation == 1
    conn.close()


def test_threads_queued_behind_a_failed_request_reconnect_instead_of_crashing(brokers):
    broker = brokers()

    def end_txn(n: int, body: Reader) -> bytes:
        if n == 1:  # the first connection dies under the first EndTxn, others queue meanwhile
            time.sleep(0.3)
            raise Hangup
        return end_txn_answer(0)

    broker.handlers[END_TXN] = end_txn
    conn = BrokerConnection("127.0.0.1", broker.port, SecurityConfig(), timeout=5).connect()
    results = _run_threads(4, lambda i: _end_txn_on(conn, f"t{i}"))
    # Before the fix the queued threads called None.sendall: AttributeError.
    assert not [r for r in results if not isinstance(r, (int, KafkaProtocolError))], results
    assert sorted(map(repr, results)).count("0") == 3, results
    conn.close()


def test_end_many_retry_pass_survives_the_shared_connection_failing(brokers):
    broker = brokers()
    seen = {"n": 0}
    lock = threading.Lock()

    def end_txn(n: int, body: Reader) -> bytes:
        with lock:
            seen["n"] += 1
            k = seen["n"]
        if k <= 4:
            return end_txn_answer(CONCURRENT)  # the pipelined pass: retry each one by one
        if k == 5:
            time.sleep(0.3)  # the other retry threads queue on the shared connection
            raise Hangup
        return end_txn_answer(0)

    broker.handlers[END_TXN] = end_txn
    with TransactionClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"}, timeout=10) as tc:
        codes = tc.end_many([(f"t{i}", 7, 0) for i in range(4)], commit=True)
    assert codes == {f"t{i}": 0 for i in range(4)}


def test_a_closed_connection_raises_a_protocol_error_not_attribute_error(brokers):
    broker = brokers()
    conn = BrokerConnection("127.0.0.1", broker.port, SecurityConfig(), timeout=5).connect()
    conn.close()
    with pytest.raises(KafkaProtocolError, match="closed"):
        _end_txn_on(conn, "t")


# --------------------------------------------------- 2. the socket is published after login


def test_concurrent_connect_waits_for_the_api_versions(brokers):
    broker = brokers(api_versions_delay=0.3)
    conn = BrokerConnection("127.0.0.1", broker.port, SecurityConfig(), timeout=5)

    def connect(i: int) -> int:
        time.sleep(0.05 * i)  # the second arrives while the first waits for ApiVersions
        return conn.connect().version_for(END_TXN, 0, 4)

    # Before the fix: "does not support API 26 ... needs Apache Kafka 3.0".
    assert _run_threads(2, connect) == [4, 4]
    conn.close()


def test_no_request_is_sent_before_the_sasl_login_finished(brokers, monkeypatch):
    broker = brokers(sasl_password="pw")
    in_scram = threading.Event()

    def slow_scram(*args):
        in_scram.set()  # between SCRAM's two round trips, outside the connection's lock
        time.sleep(0.3)
        return real_scram_client_final(*args)

    monkeypatch.setattr(broker_connection, "scram_client_final", slow_scram)
    conn = BrokerConnection("127.0.0.1", broker.port, SecurityConfig(
        protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_username="u",
        sasl_password="pw"), timeout=5)

    def run(i: int) -> object:
        if i == 0:
            return conn.connect()
        in_scram.wait(5)
        return _end_txn_on(conn.connect(), "t")

    results = _run_threads(2, run)
    assert results[1] == 0, results
    assert [k for _, k, authed in broker.log if not authed and k == END_TXN] == []
    conn.close()


# ------------------------------------------------------------- 3. TLS failures, classified


def _tls_peer(mode: str) -> int:
    """A listener that breaks the TLS handshake the way a restarting broker does."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                s, _ = srv.accept()
                s.recv(10 if mode == "reset" else 65536)  # unread data: close() sends RST
                if mode == "silent":
                    time.sleep(3)
                if mode == "reset":
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


@pytest.mark.parametrize("mode", ["eof", "reset", "silent"])
def test_a_tls_handshake_cut_by_the_network_is_retriable_not_an_auth_error(mode):
    port = _tls_peer(mode)
    conn = BrokerConnection("127.0.0.1", port, SecurityConfig(protocol="SSL",
                            verify_certificate=False, check_hostname=False), timeout=0.5)
    with pytest.raises(KafkaProtocolError) as info:
        conn.connect()
    assert type(info.value) is KafkaProtocolError, info.value
    assert f"127.0.0.1:{port}" in str(info.value)


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls"))


def _server_tls(cert) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*cert)
    return ctx


def test_an_untrusted_broker_certificate_is_still_an_auth_error(brokers, cert):
    broker = brokers(tls=_server_tls(cert))
    conn = BrokerConnection("127.0.0.1", broker.port, SecurityConfig(protocol="SSL"), timeout=5)
    with pytest.raises(KafkaAuthenticationError, match="kafka.ssl.ca.location"):
        conn.connect()


def test_a_broker_refusing_our_missing_client_certificate_is_an_auth_error(brokers, cert):
    server = _server_tls(cert)
    server.maximum_version = ssl.TLSVersion.TLSv1_2  # TLS 1.2 refuses within the handshake
    server.verify_mode = ssl.CERT_REQUIRED
    server.load_verify_locations(cert[0])
    broker = brokers(tls=server)
    conn = BrokerConnection("127.0.0.1", broker.port, SecurityConfig(
        protocol="SSL", verify_certificate=False, check_hostname=False), timeout=5)
    with pytest.raises(KafkaAuthenticationError, match="kafka.ssl.certificate.location"):
        conn.connect()


def test_a_bootstrap_broker_resetting_tls_makes_the_client_try_the_next(brokers, cert,
                                                                        monkeypatch):
    good = brokers(tls=_server_tls(cert))
    monkeypatch.setattr(transaction_client.random, "shuffle", lambda hosts: None)
    conf = {"bootstrap.servers": f"127.0.0.1:{_tls_peer('reset')},127.0.0.1:{good.port}",
            "security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}
    with TransactionClient(conf, timeout=10) as tc:
        assert tc.find_coordinators(["t"]) == {"t": ("127.0.0.1", good.port)}


# ---------------------------------------------------- 4. restarting brokers within the budget


def test_find_coordinators_waits_for_a_restarting_bootstrap_broker(brokers):
    port = _free_port()
    _later(0.5, lambda: brokers(port))
    with TransactionClient({"bootstrap.servers": f"127.0.0.1:{port}"}, timeout=10) as tc:
        assert tc.find_coordinators(["t"]) == {"t": ("127.0.0.1", port)}


def test_end_txn_waits_for_a_restarting_coordinator_and_bootstrap_broker(brokers):
    port = _free_port()
    _later(0.5, lambda: brokers(port))
    with TransactionClient({"bootstrap.servers": f"127.0.0.1:{port}"}, timeout=10) as tc:
        tc._coordinators["t"] = ("127.0.0.1", port)  # learnt before the broker went down
        assert tc.end_txn("t", 7, 0, True) == 0


def test_the_broker_list_waits_for_a_restarting_bootstrap_broker(brokers):
    """The sweeps list transactions on every broker of a Metadata answer; asked while the only
    bootstrap broker restarted, the list was tried twice at once and the sweep failed."""
    port = _free_port()
    _later(0.5, lambda: brokers(port))
    with TransactionClient({"bootstrap.servers": f"127.0.0.1:{port}"}, timeout=10) as tc:
        assert tc.brokers() == [(1, "127.0.0.1", port)]


def test_find_coordinators_asks_a_known_broker_when_the_bootstrap_one_is_gone(brokers):
    boot, coord = brokers(), brokers()
    boot.coordinator = ("127.0.0.1", coord.port)
    with TransactionClient({"bootstrap.servers": f"127.0.0.1:{boot.port}"}, timeout=2) as tc:
        assert tc.find_coordinators(["a"]) == {"a": ("127.0.0.1", coord.port)}
        boot.close()  # its pooled connection breaks too
        assert tc.find_coordinators(["b"]) == {"b": ("127.0.0.1", coord.port)}


# --------------------------------------------------------------- 5. timeouts and deadlines
# No wall-clock bounds (a loaded machine could flip them): attempts are counted, and where only the
# client's own clock matters the clock is virtual (``virtual_clock``, tests/conftest.py).


def _silent_listener() -> socket.socket:
    """Accepts TCP (the kernel's backlog) and never answers, like a host dropping packets."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s


def _count_logins(monkeypatch) -> list[int]:
    """The port of every login attempt (BrokerConnection._connect), in order."""
    ports: list[int] = []
    real = BrokerConnection._connect

    def counted(self: BrokerConnection, deadline: float) -> None:
        ports.append(self.port)
        real(self, deadline)

    monkeypatch.setattr(BrokerConnection, "_connect", counted)
    return ports


def test_a_silent_bootstrap_broker_costs_one_attempt_not_the_whole_budget(brokers, monkeypatch):
    good = brokers()
    silent = _silent_listener()
    monkeypatch.setattr(broker_connection, "ATTEMPT_TIMEOUT_S", 0.5, raising=False)
    monkeypatch.setattr(transaction_client.random, "shuffle", lambda hosts: None)
    logins = _count_logins(monkeypatch)
    conf = {"bootstrap.servers": f"127.0.0.1:{silent.getsockname()[1]},127.0.0.1:{good.port}"}
    with TransactionClient(conf, timeout=60) as tc:
        # Answered within the budget: before the fix the silent host's one attempt took all of
        # it, and the call failed.
        assert tc.find_coordinators(["t"]) == {"t": ("127.0.0.1", good.port)}
    assert logins.count(silent.getsockname()[1]) == 1  # one attempt, then the next host
    silent.close()


class _CountingLock:
    """A lock that counts the threads that asked for it (waiting or not)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = threading.Lock()
        self.asked = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        with self._count:
            self.asked += 1
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()


def test_threads_waiting_for_a_silent_broker_share_one_timeout_not_one_each(monkeypatch):
    """Eight threads ask one connection to log in to a host that never answers: one attempt,
    whose failure every waiter shares (before the fix each waiter then tried again, in turn)."""
    silent = _silent_listener()
    conn = BrokerConnection("127.0.0.1", silent.getsockname()[1], SecurityConfig(), timeout=1.0)
    conn._connect_lock = lock = _CountingLock()  # type: ignore[assignment]
    logins: list[int] = []
    real = conn._connect

    def login_once_all_wait(deadline: float) -> None:
        logins.append(1)
        # (a hang guard only: the other threads ask for the lock at once)
        give_up = time.monotonic() + 60
        while lock.asked < 8 and time.monotonic() < give_up:
            time.sleep(0.001)
        real(deadline)

    conn._connect = login_once_all_wait  # type: ignore[method-assign]
    results = _run_threads(8, lambda i: conn.connect())
    assert all(type(r) is KafkaProtocolError for r in results), results
    assert lock.asked == 8 and len(logins) == 1, (lock.asked, logins)
    silent.close()


def coordinators_loading(body: Reader) -> bytes:
    """A FindCoordinator v4 answer saying every asked key's coordinator is still loading."""
    body.int8()
    keys = body.array(lambda r: r.string())
    return Writer(True).int32(0).array(keys, lambda w, k: w.string(k).int32(-1).string("")
                                       .int32(-1).int16(LOADING).string(None).tags()
                                       ).tags().build()


def test_describe_and_its_coordinator_lookups_share_one_deadline(brokers, virtual_clock):
    broker = brokers()
    t0 = virtual_clock()

    def find(n: int, body: Reader) -> bytes:
        if virtual_clock() - t0 < 8:
            return broker.find_coordinator(n, body)
        return coordinators_loading(body)

    broker.handlers[FIND_COORDINATOR] = find
    broker.handlers[DESCRIBE_TRANSACTIONS] = lambda n, body: describe_answer(body, LOADING)
    with TransactionClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"}, timeout=10) as tc:
        with pytest.raises(TransactionError):
            tc.describe(["t"])
    # About 10 s; before the fix the nested FindCoordinator got a fresh 10 s after describe had
    # used 8 s: 18 s.
    assert virtual_clock() - t0 < 15


def test_end_many_retries_within_the_budget_its_lookup_started(brokers, virtual_clock):
    broker = brokers()
    t0 = virtual_clock()

    def find(n: int, body: Reader) -> bytes:
        if virtual_clock() - t0 > 7:
            return broker.find_coordinator(n, body)
        return coordinators_loading(body)

    broker.handlers[FIND_COORDINATOR] = find
    broker.handlers[END_TXN] = lambda n, body: end_txn_answer(CONCURRENT)
    with TransactionClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"}, timeout=10) as tc:
        codes = tc.end_many([("t1", 7, 0), ("t2", 7, 0)], commit=True)
    assert set(codes.values()) <= {CONCURRENT, 15}
    # About 10 s; before the fix each end_txn of the retry pass started a fresh 10 s budget at
    # 7 s: 17 s.
    assert virtual_clock() - t0 < 15


# ------------------------------------------------------ coordinators kept between batches


def test_a_batch_commit_asks_for_coordinators_once_and_again_only_when_they_move(brokers):
    """describe + end_many of every later batch reuse the coordinators found for the first one
    (no FindCoordinator round trip per batch); a coordinator that answers NOT_COORDINATOR is
    looked up again, in describe and in end_many alike."""
    from txkafka.connector.client.error_codes import NOT_COORDINATOR

    bootstrap, coord = brokers(), brokers()
    bootstrap.coordinator = ("127.0.0.1", coord.port)
    ids = ["t0", "t1"]

    def finds() -> int:
        return sum(1 for _, key, _ in bootstrap.log + coord.log if key == FIND_COORDINATOR)

    with TransactionClient({"bootstrap.servers": f"127.0.0.1:{bootstrap.port}"}, timeout=10) as tc:
        for _ in range(3):  # three batches
            assert set(tc.describe(ids)) == set(ids)
            assert tc.end_many([(t, 7, 0) for t in ids], commit=True) == {t: 0 for t in ids}
        assert finds() == 1

        # The coordinator moves to the bootstrap broker: the old one answers NOT_COORDINATOR.
        bootstrap.coordinator = None
        coord.handlers[DESCRIBE_TRANSACTIONS] = lambda n, body: describe_answer(body, NOT_COORDINATOR)
        coord.handlers[END_TXN] = lambda n, body: end_txn_answer(NOT_COORDINATOR)
        assert set(tc.describe(ids)) == set(ids)
        assert finds() == 2
        bootstrap.coordinator = ("127.0.0.1", coord.port)  # and back, for end_many's turn
        coord.handlers[END_TXN] = lambda n, body: end_txn_answer(0)
        bootstrap.handlers[END_TXN] = lambda n, body: end_txn_answer(NOT_COORDINATOR)
        assert tc.end_many([(t, 7, 0) for t in ids], commit=True) == {t: 0 for t in ids}
        assert finds() >= 3


def test_the_coordinators_kept_are_bounded_the_newest_ids_first(brokers, monkeypatch):
    """Every run of a query (a new run tag) and every batch write (a new sink id) brings new
    transactional ids; the client of a process that lives for days must keep a bounded number
    of their coordinators, and keep those of the ids in use (no FindCoordinator per batch)."""
    monkeypatch.setattr(transaction_client, "COORDINATORS_KEPT", 50, raising=False)
    broker = brokers()

    def finds() -> int:
        return sum(1 for _, key, _ in broker.log if key == FIND_COORDINATOR)

    with TransactionClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"}, timeout=10) as tc:
        for run in range(5):  # five runs (or batch writes) of 40 task ids each
            ids = [f"txkafka-s-{run:06x}-0-{p}-0" for p in range(40)]
            for _ in range(3):  # three batches of each run
                assert set(tc.describe(ids)) == set(ids)
                assert tc.end_many([(t, 7, 0) for t in ids], commit=True) == {t: 0 for t in ids}
            assert len(tc._coordinators) <= 50
        assert finds() == 5  # one lookup per run: the ids in use stayed known


# ------------------------------------------------------------------- 6. broker quotas (KIP-219)


def _throttling(broker: FakeBroker, throttle_ms: int) -> list[tuple[int, int, bool]]:
    """Every answer of ``broker`` says throttle_time_ms=``throttle_ms``; as Kafka does, the broker
    then reads nothing more from that connection until the time has passed. Returns a log of
    (connection, api key, whether the request came while its connection was muted): the fake
    reads at once, so it sees a client that sends early; Kafka would leave it unread."""
    muted: dict[int, float] = {}
    log: list[tuple[int, int, bool]] = []

    def throttled(api: int, answer: Callable[[int, Reader], bytes]
                  ) -> Callable[[int, Reader], bytes]:
        def handle(n: int, body: Reader) -> bytes:
            log.append((n, api, time.monotonic() < muted.get(n, 0.0)))
            out = answer(n, body)
            muted[n] = time.monotonic() + throttle_ms / 1000
            return struct.pack(">i", throttle_ms) + out[4:]  # (each answer starts with it)
        return handle

    for api, answer in list(broker.handlers.items()):
        broker.handlers[api] = throttled(api, answer)
    return log


def test_requests_wait_for_the_throttle_time_a_quota_set(brokers):
    """A broker enforcing a quota answers at once and mutes the connection for throttle_time_ms:
    the client sends its next request on that connection only after that (the Java client's and
    librdkafka's rule): FindCoordinator, EndTxn, DescribeTransactions, Metadata alike. A
    throttle outlasting a call's deadline fails it unsent; the connection stays usable."""
    broker = brokers()
    log = _throttling(broker, 300)
    with TransactionClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"}, timeout=10) as tc:
        assert tc.end_txn("t", 7, 0, commit=True) == 0
        assert tc.end_txn("t", 7, 0, commit=True) == 0
        assert tc.describe(["t"])["t"].state == "Ongoing"
        assert tc.brokers()
    assert len(log) >= 5 and not [e for e in log if e[2]], log

    conn = BrokerConnection("127.0.0.1", broker.port, SecurityConfig()).connect()
    conn.throttle(60_000)
    with pytest.raises(KafkaProtocolError, match="throttles this client for 6.*s more.*quota"):
        conn.request(END_TXN, 4, b"", flexible=True, deadline=time.monotonic() + 0.2)
    assert conn.connected and not conn.broken
    conn.close()


def test_the_commit_client_identifies_itself_with_kafka_client_id(brokers):
    """Quotas by client id (and the brokers' request logs) cover the driver's commit client too:
    it sends ``kafka.client.id`` when set, as txkafka's producer and fetch do."""
    broker = brokers()
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.port}"}
    with TransactionClient({**conf, "client.id": "orders-etl"}, timeout=10) as tc:
        assert tc.end_txn("t", 7, 0, commit=True) == 0
    assert broker.client_ids == {"orders-etl"}
    broker.client_ids.clear()
    with TransactionClient(conf, timeout=10) as tc:
        assert tc.end_txn("t", 7, 0, commit=True) == 0
    assert broker.client_ids == {"txkafka-committer"}
