"""A blocking connection to one Kafka broker: TLS, SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER),
API versions.

Why: the sink's driver talks to transaction coordinators directly (EndTxn, DescribeTransactions), so
it needs a client that honours the same ``kafka.*`` security settings as librdkafka on the data path.
Settings use librdkafka's names (``security.protocol``, ``sasl.mechanism``, ``ssl.ca.location``...).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import secrets
import socket
import ssl
import struct
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Iterator, Mapping

from ..errors import KafkaProtocolError, KafkaAuthenticationError, KafkaConfigError
from .keystores import read_pkcs12_keystore
from .error_codes import UNSUPPORTED_VERSION, error_name
from .config import TXKAFKA_SASL_MECHANISMS, refuse_two_client_identities
from .protocol import Reader, Writer, request_header
from .oauthbearer import (
    CLIENT_ERROR_ACK,
    OidcClientCredentialsSource,
    UnsecuredJwtSource,
    client_first_message,
    token_source_from_config,
)
from .tls import load_client_identity, trust_context

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

_SCRAM = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = TXKAFKA_SASL_MECHANISMS
# A login whose broker session (KIP-368 connections.max.reauth.ms, or the OAUTHBEARER token's
# lifetime) is this far through is replaced by a new login before the next request.
SESSION_RENEW_FRACTION = 0.85

# Correlation ids are int32 on the wire: they wrap to 0 after 2**31 - 1 (the Java client and
# librdkafka wrap too); a connection's answers come in order, so an id only has to differ from
# those of the few requests in flight.
_CORRELATION_MOD = 2**31

# Cap of one socket operation (connect, TLS handshake, one read): a host that drops packets costs
# this much per attempt, so retries on other brokers fit in the caller's budget.
ATTEMPT_TIMEOUT_S = 10.0

_DEADLINE: ContextVar[float | None] = ContextVar("txkafka_deadline", default=None)


@dataclass(frozen=True)
class ApiRange:
    """The versions of one request that txkafka can send: a broker serves it if it offers one of
    them. Each module that sends a request names its range once; the sink's start checks compare
    the brokers' ApiVersions with them, so a missing request fails a query at start, named."""

    key: int
    name: str
    lo: int
    hi: int = 0x7FFF  # any newer version too (the request's format is the client library's)

    @property
    def spec(self) -> tuple[int, int, int]:
        """(key, lo, hi), what BrokerConnection.version_for takes."""
        return self.key, self.lo, self.hi

    def offered_by(self, versions: Mapping[int, tuple[int, int]]) -> bool:
        broker = versions.get(self.key)
        return broker is not None and broker[1] >= self.lo and broker[0] <= self.hi

    def __str__(self) -> str:
        wanted = (f"v{self.lo}" if self.lo == self.hi else f"v{self.lo}+" if self.hi == 0x7FFF
                  else f"v{self.lo}-{self.hi}")
        return f"{self.name} (API {self.key}) {wanted}"


def current_deadline() -> float | None:
    """The ``time.monotonic()`` deadline of the enclosing :func:`deadline_scope`, if any."""
    return _DEADLINE.get()


@contextlib.contextmanager
def deadline_scope(seconds: float) -> Iterator[float]:
    """Bound everything inside (connects, requests, retries) by one deadline shared with callers.

    Why: client calls nest (describe -> find_coordinators, end_many -> end_txn) and each starting a
    fresh budget would multiply the caller's timeout; the earlier deadline wins. A context variable
    carries it through methods tests and callers replace; thread pools copy it with the context.
    """
    outer = _DEADLINE.get()
    deadline = time.monotonic() + seconds
    if outer is not None:
        deadline = min(deadline, outer)
    token = _DEADLINE.set(deadline)
    try:
        yield deadline
    finally:
        _DEADLINE.reset(token)


@dataclass(frozen=True)
class SecurityConfig:
    """Security settings shared with librdkafka (librdkafka option names)."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "GSSAPI"
    sasl_username: str | None = field(default=None, repr=False)
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None
    ssl_ca_pem: str | None = field(default=None, repr=False)
    ssl_crl_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_certificate_pem: str | None = field(default=None, repr=False)
    ssl_key_location: str | None = None
    ssl_key_pem: str | None = field(default=None, repr=False)
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_keystore_location: str | None = None
    ssl_keystore_password: str | None = field(default=None, repr=False)
    verify_certificate: bool = True
    check_hostname: bool = True
    # OAUTHBEARER: where tokens come from (holds the client secret and the token cache).
    oauthbearer: UnsecuredJwtSource | OidcClientCredentialsSource | None = field(
        default=None, repr=False, compare=False)

    @classmethod
    def from_kafka_config(cls, conf: Mapping[str, object]) -> "SecurityConfig":
        """Read the librdkafka-style settings (keys without the ``kafka.`` prefix)."""

        def get(key: str) -> str | None:
            v = conf.get(key)
            return None if v is None else str(v)

        protocol = (get("security.protocol") or "PLAINTEXT").upper()
        if protocol not in _PROTOCOLS:
            raise KafkaConfigError(
                f"kafka.security.protocol={protocol!r} is not one of {', '.join(_PROTOCOLS)}"
            )
        mech = (get("sasl.mechanism") or get("sasl.mechanisms") or "GSSAPI").upper()
        if protocol.startswith("SASL") and mech not in _MECHANISMS:
            raise KafkaConfigError(
                f"kafka.sasl.mechanism={mech!r}: the transaction client supports PLAIN, "
                "SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER"
            )
        oauthbearer = None
        if protocol.startswith("SASL") and mech == "OAUTHBEARER":
            oauthbearer = token_source_from_config(get)
        elif protocol.startswith("SASL") and (not get("sasl.username")
                                              or get("sasl.password") is None):
            raise KafkaConfigError(
                f"security.protocol {protocol} needs kafka.sasl.username and kafka.sasl.password"
            )
        refuse_two_client_identities(get)
        if get("ssl.keystore.location") and get("ssl.keystore.password") is None:
            raise KafkaConfigError(
                "kafka.ssl.keystore.location needs kafka.ssl.keystore.password (librdkafka "
                "requires it too; a keystore without a password takes an empty one)")
        verify = (get("enable.ssl.certificate.verification") or "true").lower() != "false"
        algo = get("ssl.endpoint.identification.algorithm")
        check_host = verify and (algo is None or algo.lower() == "https")
        return cls(
            protocol=protocol,
            sasl_mechanism=mech,
            sasl_username=get("sasl.username"),
            sasl_password=get("sasl.password"),
            ssl_ca_location=get("ssl.ca.location"),
            ssl_ca_pem=get("ssl.ca.pem"),
            ssl_crl_location=get("ssl.crl.location"),
            ssl_certificate_location=get("ssl.certificate.location"),
            ssl_certificate_pem=get("ssl.certificate.pem"),
            ssl_key_location=get("ssl.key.location"),
            ssl_key_pem=get("ssl.key.pem"),
            ssl_key_password=get("ssl.key.password"),
            ssl_keystore_location=get("ssl.keystore.location"),
            ssl_keystore_password=get("ssl.keystore.password"),
            verify_certificate=verify,
            check_hostname=check_host,
            oauthbearer=oauthbearer,
        )

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL")

    def ssl_context(self) -> ssl.SSLContext:
        ctx = trust_context(self.ssl_ca_location, self.ssl_ca_pem,
                            location_option="kafka.ssl.ca.location", pem_option="kafka.ssl.ca.pem")
        if not self.verify_certificate:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx.check_hostname = self.check_hostname
            if self.ssl_crl_location:
                # librdkafka's ssl.crl.location: the broker's certificate is checked against the
                # CA's revocation list (X509_V_FLAG_CRL_CHECK, the leaf), like OpenSSL there.
                try:
                    ctx.load_verify_locations(cafile=self.ssl_crl_location)
                except (OSError, ssl.SSLError) as e:
                    raise KafkaConfigError(
                        f"kafka.ssl.crl.location={self.ssl_crl_location!r} could not be read as "
                        f"a PEM certificate revocation list: {e}") from None
                ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        if self.ssl_keystore_location:
            # librdkafka hands the file to OpenSSL; Python's ssl reads PEM only.
            ident = read_pkcs12_keystore(self.ssl_keystore_location, self.ssl_keystore_password)
            load_client_identity(
                ctx, cert_path=None, cert_pem=ident.certificate_chain_pem, key_path=None,
                key_pem=ident.key_pem, key_password=None,
                where=f"kafka.ssl.keystore.location={self.ssl_keystore_location!r}")
        elif self.ssl_certificate_location or self.ssl_certificate_pem:
            load_client_identity(
                ctx, cert_path=self.ssl_certificate_location, cert_pem=self.ssl_certificate_pem,
                key_path=self.ssl_key_location, key_pem=self.ssl_key_pem,
                key_password=self.ssl_key_password,
                where=(f"kafka.ssl.certificate.location={self.ssl_certificate_location!r}, "
                       f"kafka.ssl.key.location={self.ssl_key_location!r}"),
                hint=("Check that both are PEM and that kafka.ssl.key.password is the key's "
                      "password (a wrong one reads as 'PEM lib')"))
        return ctx


class _NotConnected(Exception):
    """The shared socket was reset (another request failed) before this request was sent."""


class BrokerConnection:
    """One authenticated socket to one broker, shared by threads; requests are serialised by a lock.

    ``timeout`` caps each socket operation (connect, TLS handshake, one read; default
    ATTEMPT_TIMEOUT_S): a host that drops packets costs at most that per attempt. The whole call
    is bounded by a deadline: the ``deadline`` argument, else the enclosing
    :func:`deadline_scope`, else ``timeout`` from now.
    """

    def __init__(
        self,
        host: str,
        port: int,
        security: SecurityConfig,
        *,
        timeout: float | None = None,
        client_id: str = "txkafka",
    ) -> None:
        self.host = host
        self.port = port
        self.security = security
        self.timeout = ATTEMPT_TIMEOUT_S if timeout is None else timeout
        self.client_id = client_id
        self._sock: socket.socket | None = None  # published only once logged in
        self._closed = False
        self._correlation = 0
        self._lock = threading.Lock()  # one exchange at a time on the socket
        self._connect_lock = threading.Lock()  # one login at a time; others wait for its result
        self._connect_attempts = 0
        self._connect_error: KafkaProtocolError | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}
        # time.monotonic() after which the login is renewed (broker session lifetime), or None.
        self._renew_at: float | None = None
        # time.monotonic() until which the broker throttles this client here (throttle()).
        self._throttled_until = 0.0

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, {self.security.protocol})"

    # ------------------------------------------------------------------ set-up

    @property
    def closed(self) -> bool:
        """close() was called: the connection is done for good."""
        return self._closed

    @property
    def connected(self) -> bool:
        """Logged in and not closed (a request may still find the broker gone)."""
        return self._sock is not None and not self._closed

    @property
    def broken(self) -> bool:
        """After a request on it failed: whether the failure broke this connection (its stream
        was dropped: a socket error, a read past its timeout, a mismatched answer; or it never
        logged in). A request that failed before it was written (no time left, or its deadline
        passed waiting for the lock behind other threads' requests) leaves a healthy connection:
        a pool keeps it shared, and does not count its broker as failed."""
        return not self.connected

    @property
    def login_expiring(self) -> bool:
        """The broker session is nearly over (SESSION_RENEW_FRACTION of it passed): the next
        request should go on a new login."""
        renew_at = self._renew_at
        return renew_at is not None and time.monotonic() >= renew_at

    def throttle(self, throttle_ms: int) -> None:
        """Note an answer's throttle_time_ms. A broker enforcing a quota (KIP-13 byte rates,
        KIP-124 request time) answers at once and then reads nothing more from this connection
        until that time has passed (KIP-219): the next request waits for it here, as the Java
        client and librdkafka wait, rather than sit unread in the broker while its own timeout
        runs (or, past it, be given up and sent again on a new connection)."""
        if throttle_ms > 0:
            self._throttled_until = max(self._throttled_until,
                                        time.monotonic() + throttle_ms / 1000)

    @property
    def throttle_left_s(self) -> float:
        """How long the broker still throttles this client on this connection (0: not)."""
        return max(0.0, self._throttled_until - time.monotonic())

    def _wait_throttle(self, deadline: float, api_key: int) -> None:
        """Wait out the broker's throttle before writing (the caller holds the lock); a
        throttle that outlasts the call's deadline fails it unsent (the connection stays)."""
        left = self.throttle_left_s
        if not left:
            return
        if time.monotonic() + left > deadline:
            raise KafkaProtocolError(
                f"the broker {self.host}:{self.port} throttles this client for {left:.1f}s more "
                f"(a quota: its answers' throttle_time_ms), past API {api_key}'s timeout; the "
                "request was not sent. Check the quotas set for this client's user and client.id")
        time.sleep(left)

    def _deadline(self, deadline: float | None) -> float:
        if deadline is not None:
            return deadline
        scoped = current_deadline()
        if scoped is not None:
            return scoped
        # A call's own timeout starts when the broker reads this connection again.
        return time.monotonic() + self.throttle_left_s + self.timeout

    def _attempt_timeout(self, deadline: float) -> float:
        """Socket timeout of one operation: the per-attempt cap, or what is left of the call."""
        return max(0.001, min(self.timeout, deadline - time.monotonic()))

    def _check_budget(self, deadline: float, what: str) -> None:
        if time.monotonic() >= deadline:
            raise KafkaProtocolError(
                f"no time left to {what} {self.host}:{self.port}: the call's timeout ran out"
            )

    def connect(self, deadline: float | None = None) -> "BrokerConnection":
        """Connect and log in, once; concurrent callers wait for that login and share its result."""
        if self._closed:
            raise self._closed_error()
        if self._sock is not None:
            return self
        deadline = self._deadline(deadline)
        self._check_budget(deadline, "connect to")
        seen = self._connect_attempts
        if not self._connect_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise KafkaProtocolError(
                f"timed out waiting for another thread's connection to {self.host}:{self.port}"
            )
        try:
            if self._sock is not None:
                return self
            failed = self._connect_error
            if self._connect_attempts != seen and failed is not None:
                # The attempt we waited for failed just now: the same answer, not another wait.
                raise type(failed)(str(failed))
            try:
                self._connect(deadline)
                self._connect_error = None
            except KafkaProtocolError as e:
                self._connect_error = e
                raise
            finally:
                self._connect_attempts += 1  # counted once finished: waiters know theirs ended
        finally:
            self._connect_lock.release()
        return self

    def _closed_error(self) -> KafkaProtocolError:
        return KafkaProtocolError(
            f"the connection to {self.host}:{self.port} was closed (dropped after an error); "
            "retry on a new connection"
        )

    def _connect(self, deadline: float) -> None:
        # Config errors (CA file, client key) surface before any socket is opened.
        ctx = self.security.ssl_context() if self.security.uses_ssl else None
        where = f"{self.host}:{self.port}"
        try:
            raw = socket.create_connection((self.host, self.port),
                                           timeout=self._attempt_timeout(deadline))
        except OSError as e:
            raise KafkaProtocolError(f"cannot connect to broker {where}: {e}") from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock: socket.socket = raw
        if ctx is not None:
            try:
                sock = ctx.wrap_socket(raw, server_hostname=self.host)
            except (OSError, EOFError) as e:
                raw.close()
                raise _tls_handshake_error(e, where) from None
        session_ms, session_from = 0, 0.0
        try:
            versions = self._negotiate_versions(sock, deadline)
            if self.security.uses_sasl:
                session_ms, session_from = self._authenticate(sock, versions, deadline)
        except BaseException:
            with contextlib.suppress(OSError):
                sock.close()
            raise
        with self._lock:
            if self._closed:
                with contextlib.suppress(OSError):
                    sock.close()
                raise self._closed_error()
            # Published only now: other threads must not send before ApiVersions and the login.
            self.api_versions = versions
            self._renew_at = (session_from + SESSION_RENEW_FRACTION * session_ms / 1000.0
                              if session_ms > 0 else None)
            self._sock = sock

    def _renew_expiring_login(self) -> None:
        """Close the socket once its broker session is nearly over; the next request logs in again.

        Why: a broker with connections.max.reauth.ms (KIP-368) closes a connection whose session
        expired at its next request, unanswered; an OAUTHBEARER session ends with its token. A new
        login (with a fresh token) before that is cheaper than a failed request.
        """
        if not self.login_expiring:
            return
        with self._lock:
            # (checked again: another thread may have logged in anew meanwhile)
            if self.login_expiring and self._sock is not None:
                sock, self._sock, self._renew_at = self._sock, None, None
                with contextlib.suppress(OSError):
                    sock.close()

    def close(self) -> None:
        """Close for good, after the request in flight; later requests raise KafkaProtocolError."""
        self._closed = True
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def version_for(self, api_key: int, lo: int, hi: int) -> int:
        """Highest version both sides support within [lo, hi], or a clear error."""
        return self._pick_version(self.api_versions, api_key, lo, hi)


    def _pick_version(self, versions: dict[int, tuple[int, int]], api_key: int, lo: int,
                      hi: int) -> int:
        if not versions:
            raise KafkaProtocolError(f"not connected to broker {self.host}:{self.port} yet")
        broker = versions.get(api_key)
        if broker is None or broker[1] < lo or broker[0] > hi:
            raise KafkaProtocolError(
                f"broker {self.host}:{self.port} does not support API {api_key} versions {lo}-{hi} "
                f"(it offers {broker}); txkafka needs Apache Kafka 3.0 or newer"
            )
        return min(hi, broker[1])

    def _negotiate_versions(self, sock: socket.socket,
                            deadline: float) -> dict[int, tuple[int, int]]:
        body = Writer(True).string("txkafka").string("1").tags().build()
        # ApiVersions answers with response header v0 even at flexible versions.
        r = self._exchange(sock, [(API_VERSIONS, 3, body, True, False)], deadline)[0]
        r.flexible = True
        err = r.int16()
        if err == UNSUPPORTED_VERSION:  # broker older than 2.4; retry at v0
            r = self._exchange(sock, [(API_VERSIONS, 0, b"", False, False)], deadline)[0]
            err = r.int16()
        if err:
            raise KafkaProtocolError(f"ApiVersions failed: {error_name(err)}")

        def one(rr: Reader) -> tuple[int, int, int]:
            key, lo, hi = rr.int16(), rr.int16(), rr.int16()
            rr.tags()
            return key, lo, hi

        return {k: (lo, hi) for k, lo, hi in r.array(one)}

    # -------------------------------------------------------------------- SASL

    def _authenticate(self, sock: socket.socket, versions: dict[int, tuple[int, int]],
                      deadline: float) -> tuple[int, float]:
        """Log in on ``sock``; returns the broker's session lifetime in ms (0: no limit) and when
        (time.monotonic()) the last SaslAuthenticate was written. The session is counted from
        then: the broker starts it once it has checked that message, so the login's earlier round
        trips and a token's fetch are not spent of it (a slow login, on a loaded machine, must not
        be due for renewal at once: a pipelining sender would log in again before each request)."""
        mech = self.security.sasl_mechanism
        v = self._pick_version(versions, SASL_HANDSHAKE, 1, 1)
        body = Writer(False).string(mech).build()
        r = self._exchange(sock, [(SASL_HANDSHAKE, v, body, False, False)], deadline)[0]
        err = r.int16()
        offered = r.array(lambda rr: rr.string())
        if err:
            raise KafkaAuthenticationError(
                f"broker {self.host}:{self.port} refused SASL mechanism {mech} "
                f"({error_name(err)}); it offers {offered}"
            )
        if mech == "OAUTHBEARER":
            return self._oauthbearer_login(sock, versions, deadline)
        user = self.security.sasl_username or ""
        password = self.security.sasl_password or ""
        session_ms, sent = 0, 0.0

        def step(payload: bytes) -> bytes:
            nonlocal session_ms, sent
            sent = time.monotonic()
            err, msg, data, session_ms = self._sasl_exchange(sock, versions, payload, deadline)
            if err:
                raise KafkaAuthenticationError(
                    f"SASL {mech} authentication of user {user!r} at {self.host}:{self.port} "
                    f"failed: {error_name(err)} ({msg or 'no detail'}). Check "
                    "kafka.sasl.username/password."
                )
            return data

        if mech == "PLAIN":
            step(b"\0" + user.encode() + b"\0" + password.encode())
            return session_ms, sent
        nonce = base64.b64encode(secrets.token_bytes(18)).decode()
        first = scram_client_first(user, nonce)
        server_first = step(("n,," + first).encode()).decode()
        final, expected_server_final = scram_client_final(mech, password, first, server_first)
        if step(final.encode()).decode() != expected_server_final:
            raise KafkaAuthenticationError("SCRAM: the server's signature did not verify")
        return session_ms, sent

    def _oauthbearer_login(self, sock: socket.socket, versions: dict[int, tuple[int, int]],
                           deadline: float) -> tuple[int, float]:
        """RFC 7628 over SaslAuthenticate: the token in the client's first message; an empty
        answer is success, a JSON error is acknowledged with ^A and the broker then fails the
        exchange. Messages name the principal and the options to check, never the token."""
        source = self.security.oauthbearer
        if source is None:
            raise KafkaConfigError("kafka.sasl.mechanism=OAUTHBEARER has no token source configured")
        token = source.token(deadline)
        where = f"{self.host}:{self.port}"
        sent = time.monotonic()  # (after the token's fetch: the session starts with its check)
        err, msg, data, session_ms = self._sasl_exchange(
            sock, versions, client_first_message(token.value, token.extensions), deadline)
        if not err and not data:
            return session_ms, sent
        source.invalidate(token)  # refused: the next login gets a new token
        status = ""
        if data:
            status = _oauthbearer_status(data)
            err, msg, _, _ = self._sasl_exchange(sock, versions, CLIENT_ERROR_ACK, deadline)
        detail = error_name(err) if err else "refused"
        if msg and msg.strip() != data.decode("utf-8", "replace").strip():
            detail += f": {msg}"  # Kafka repeats the JSON error here: said once is enough
        if status:
            detail += f", {status}"
        raise KafkaAuthenticationError(
            f"SASL OAUTHBEARER authentication of principal {token.principal!r} at {where} failed "
            f"({detail}); the token came from {source.source_name}. {source.check_hint}."
        )

    def _sasl_exchange(self, sock: socket.socket, versions: dict[int, tuple[int, int]],
                       payload: bytes, deadline: float) -> tuple[int, str | None, bytes, int]:
        """One SaslAuthenticate round: (error code, error message, server bytes, session ms)."""
        v = self._pick_version(versions, SASL_AUTHENTICATE, 0, 2)
        flexible = v >= 2
        body = Writer(flexible).bytes_(payload).tags().build()
        r = self._exchange(sock, [(SASL_AUTHENTICATE, v, body, flexible, flexible)], deadline)[0]
        err = r.int16()
        msg = r.string()
        data = r.bytes_() or b""
        session_ms = r.int64() if v >= 1 else 0
        return err, msg, data, session_ms

    # --------------------------------------------------------------- requests

    def request(self, api_key: int, version: int, body: bytes, *, flexible: bool,
                deadline: float | None = None) -> Reader:
        """Send one request and return a reader positioned at the response body."""
        return self._send([(api_key, version, body, flexible, flexible)], deadline)[0]

    def request_many(self, requests: list[tuple[int, int, bytes | list[bytes], bool]], *,
                     deadline: float | None = None) -> list[Reader]:
        """Pipeline several requests on this connection: one write, then the answers in order.

        Kafka handles a connection's requests one at a time, in the order sent; pipelining saves
        the round trips between them (a batch's EndTxn calls to one coordinator cost one network
        round trip plus the broker's work on each), it does not make the broker work in parallel.
        """
        return self._send([(a, v, b, f, f) for a, v, b, f in requests], deadline)

    def _send(self, requests: list[tuple[int, int, bytes, bool, bool]],
              deadline: float | None) -> list[Reader]:
        deadline = self._deadline(deadline)
        for _ in range(3):
            self._check_budget(deadline, f"send API {requests[0][0]} to")
            self._renew_expiring_login()
            self.connect(deadline)
            try:
                return self._exchange(None, requests, deadline)
            except _NotConnected:
                continue  # nothing was sent: log in again and send
        raise KafkaProtocolError(
            f"the connection to {self.host}:{self.port} kept being reset by other requests' "
            "failures before this one could be sent"
        )

    def _exchange(self, sock: socket.socket | None,
                  requests: list[tuple[int, int, bytes, bool, bool]],
                  deadline: float) -> list[Reader]:
        """One write, then the answers. ``sock`` None: the published socket (else the login's)."""
        api_key = requests[0][0]
        if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise KafkaProtocolError(
                f"timed out waiting for the connection to {self.host}:{self.port}: other "
                f"requests held it until API {api_key}'s deadline"
            )
        try:
            if sock is None:
                sock = self._sock
                if sock is None:
                    if self._closed:
                        raise self._closed_error()
                    raise _NotConnected()
                self._wait_throttle(deadline, api_key)  # (a login's requests go at once)
            frames = []
            cids = []
            for key, version, body, flex_req, _flex_resp in requests:
                cids.append(self._frame(frames, key, version, body, flex_req))
            payloads = []
            with self._io_errors(sock, api_key):
                sock.settimeout(self._attempt_timeout(deadline))
                _write_frames(sock, frames)
                for _ in requests:
                    size = struct.unpack(">i", self._recv_exact(sock, 4, deadline))[0]
                    payloads.append(self._recv_exact(sock, size, deadline))
            readers = []
            for cid, payload, req in zip(cids, payloads, requests):
                readers.append(self._reader(sock, cid, payload, req[4]))
            return readers
        finally:
            self._lock.release()

    def _frame(self, frames: list, key: int, version: int, body: bytes | list,
               flexible: bool) -> int:
        """Append one request's frame to ``frames`` (the caller holds the lock); its
        correlation id. A body may come in pieces (a Produce request's record batches), written
        from where they are."""
        self._correlation = (self._correlation + 1) % _CORRELATION_MOD
        head = request_header(key, version, self._correlation, self.client_id, flexible)
        pieces = body if isinstance(body, list) else [body]
        size = len(head) + sum(len(b) for b in pieces)
        frames += [struct.pack(">i", size), head, *pieces]
        return self._correlation

    def _reader(self, sock: socket.socket, cid: int, payload: bytes | bytearray,
                flexible: bool) -> Reader:
        r = Reader(payload, flexible)
        got = r.int32()
        if got != cid:
            self._discard(sock)
            raise KafkaProtocolError(f"correlation id mismatch: sent {cid}, got {got}")
        r.tags()
        return r

    def send_pipelined(self, api_key: int, version: int, body: bytes | list, *, flexible: bool,
                       deadline: float | None = None) -> int:
        """Write one request without waiting for its answer; returns its correlation id.

        For a connection one caller owns alone (a producer's sender): it keeps several requests
        in flight and reads the answers, in the order sent, with :meth:`receive_pipelined`. The
        login is renewed only by :meth:`connect_idle`, never with answers outstanding: once
        :attr:`login_expiring`, the owner sends nothing more until its answers are in. With an
        explicit ``deadline`` the write has no per-attempt cap: a broker reads a connection's
        next request only once it answered the one before, which an acks=all Produce may hold up
        to its own timeout, so a large request can wait that long in the socket's buffers.
        """
        capped = deadline is None
        deadline = self._deadline(deadline)
        self.connect(deadline)
        with self._lock:
            sock = self._sock
            if sock is None:
                raise self._closed_error()
            if not capped:
                self._wait_throttle(deadline, api_key)  # (a previous owner's answers said so)
            frames: list = []
            cid = self._frame(frames, api_key, version, body, flexible)
            with self._io_errors(sock, api_key):
                sock.settimeout(self._attempt_timeout(deadline) if capped
                                else max(0.001, deadline - time.monotonic()))
                _write_frames(sock, frames)
            return cid

    def receive_pipelined(self, cid: int, api_key: int, *, flexible: bool,
                          deadline: float | None = None) -> Reader:
        """The answer to the oldest request :meth:`send_pipelined` wrote (``cid``, checked).

        Waited for until ``deadline`` with no per-read cap: the broker may legitimately hold
        the answer that long (an acks=all Produce waits for its followers up to the request's
        own timeout), so the caller derives the deadline from that timeout."""
        deadline = self._deadline(deadline)
        with self._lock:
            sock = self._sock
            if sock is None:
                raise self._closed_error()
            with self._io_errors(sock, api_key):
                size = struct.unpack(">i", self._recv_exact(sock, 4, deadline, capped=False))[0]
                payload = self._recv_exact(sock, size, deadline, capped=False)
            return self._reader(sock, cid, payload, flexible)

    def connect_idle(self, deadline: float | None = None) -> "BrokerConnection":
        """connect(), renewing a nearly expired login first: for a pipelining owner with no
        answers outstanding."""
        self._renew_expiring_login()
        return self.connect(deadline)

    @contextlib.contextmanager
    def _io_errors(self, sock: socket.socket, api_key: int) -> Iterator[None]:
        """Socket failures as typed errors (the stream is then broken: the socket is dropped)."""
        try:
            yield
        except ssl.SSLError as e:
            self._discard(sock)
            if "ALERT" in str(e.reason or "").upper():
                raise KafkaAuthenticationError(
                    f"TLS: the broker {self.host}:{self.port} rejected the connection "
                    f"({e.reason}). The listener probably requires a client certificate it "
                    "trusts: check kafka.ssl.certificate.location and kafka.ssl.key.location"
                ) from None
            raise KafkaProtocolError(
                f"connection to {self.host}:{self.port} failed during API {api_key}: "
                f"SSLError: {e.reason or e}"
            ) from None
        except TimeoutError:
            self._discard(sock)
            raise KafkaProtocolError(
                f"broker {self.host}:{self.port} did not answer API {api_key} in time (at most "
                f"{self.timeout:g}s per read, within the call's timeout)"
            ) from None
        except (OSError, EOFError) as e:
            self._discard(sock)
            raise KafkaProtocolError(
                f"connection to {self.host}:{self.port} failed during API {api_key}: "
                f"{type(e).__name__}: {e}"
            ) from None

    def _discard(self, sock: socket.socket) -> None:
        """Close a socket whose stream broke (the caller holds the lock); the next request
        reconnects."""
        with contextlib.suppress(OSError):
            sock.close()
        if self._sock is sock:
            self._sock = None

    def _recv_exact(self, sock: socket.socket, n: int, deadline: float, *,
                    capped: bool = True) -> bytearray:
        """``n`` bytes, received straight into one buffer: a Fetch response of megabytes is copied
        once, from the socket, not again per chunk and into a final ``bytes``."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        try:
            while got < n:
                sock.settimeout(self._attempt_timeout(deadline) if capped
                                else max(0.001, deadline - time.monotonic()))
                k = sock.recv_into(view[got:], n - got)
                if not k:
                    raise EOFError("broker closed the connection")
                got += k
        finally:
            view.release()
        return buf


# Pieces at least this big are written from where they are; smaller ones are joined first (one
# write for a request's header fields rather than a system call each).
_DIRECT_WRITE_BYTES = 64 * 1024


def _write_frames(sock: socket.socket, frames: list) -> None:
    """Write the buffers in order without joining the large ones (a Produce request's record
    batches: views of Arrow buffers, written without a copy on a plain socket)."""
    small: list = []
    for f in frames:
        if len(f) >= _DIRECT_WRITE_BYTES:
            if small:
                sock.sendall(b"".join(small))
                small = []
            sock.sendall(f)
        else:
            small.append(f)
    if small:
        sock.sendall(b"".join(small))


def _oauthbearer_status(data: bytes) -> str:
    """The broker's RFC 7628 error (JSON: status, scope) as text fit for a message."""
    try:
        doc = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return "an error that is not JSON"
    if not isinstance(doc, dict):
        return "an error that is not a JSON object"
    parts = [f"{k}={str(doc[k])[:200]!r}" for k in ("status", "scope") if doc.get(k)]
    return ", ".join(parts) or "an error without a status"


def _tls_handshake_error(e: BaseException, where: str) -> KafkaProtocolError:
    """Certificate and TLS-alert failures are final (authentication); a cut connection retries.

    Why: a broker that restarts resets or closes handshakes, or stops answering; callers retry
    KafkaProtocolError but give up at once on KafkaAuthenticationError.
    """
    if isinstance(e, ssl.SSLCertVerificationError):
        why = e.reason or str(e)
        if e.verify_message:
            why = f"{why} ({e.verify_message})"
        return KafkaAuthenticationError(
            f"TLS handshake with {where} failed: {why}. Check kafka.ssl.ca.location (the CA that "
            "signed the broker certificate) and the broker's host name "
            "(kafka.ssl.endpoint.identification.algorithm)."
        )
    reason = str(getattr(e, "reason", None) or "")
    # EOF, reset, timeout: plain OSErrors or SSLErrors saying EOF (OpenSSL 3: UNEXPECTED_EOF...).
    cut = (not isinstance(e, ssl.SSLError) or "EOF" in reason.upper()
           or isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)))
    if cut:
        return KafkaProtocolError(
            f"TLS handshake with {where} was cut ({type(e).__name__}: {reason or e}); the broker "
            "may be restarting"
        )
    if "ALERT" in reason.upper():
        return KafkaAuthenticationError(
            f"TLS handshake with {where} failed: the broker rejected the connection ({reason}). "
            "The listener probably requires a client certificate it trusts: check "
            "kafka.ssl.certificate.location and kafka.ssl.key.location, and kafka.ssl.ca.location"
        )
    return KafkaAuthenticationError(
        f"TLS handshake with {where} failed: {reason or e}. Check that the listener speaks TLS "
        "(kafka.security.protocol) and kafka.ssl.ca.location"
    )


def scram_client_first(user: str, nonce: str) -> str:
    """The client-first-message-bare of RFC 5802."""
    safe_user = user.replace("=", "=3D").replace(",", "=2C")
    return f"n={safe_user},r={nonce}"


def scram_client_final(mech: str, password: str, client_first_bare: str,
                       server_first: str) -> tuple[str, str]:
    """RFC 5802 client-final-message and the server-final-message we must then receive."""
    digest = _SCRAM[mech]
    nonce = client_first_bare.split("r=", 1)[1]
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    if not attrs.get("r", "").startswith(nonce):
        raise KafkaAuthenticationError("SCRAM: the server's nonce does not extend ours")
    salt = base64.b64decode(attrs["s"])
    salted = hashlib.pbkdf2_hmac(digest().name, password.encode(), salt, int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    final_no_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{client_first_bare},{server_first},{final_no_proof}".encode()
    signature = hmac.new(stored_key, auth_message, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    server_sig = base64.b64encode(hmac.new(server_key, auth_message, digest).digest()).decode()
    return f"{final_no_proof},p={base64.b64encode(proof).decode()}", f"v={server_sig}"


def split_host_port(server: str) -> tuple[str, int]:
    """One ``bootstrap.servers`` entry (``host:port``, ``[v6]:port``, an optional
    ``PROTOCOL://``) as (host, port)."""
    s = server.strip()
    for scheme in ("PLAINTEXT://", "SSL://", "SASL_PLAINTEXT://", "SASL_SSL://"):
        if s.upper().startswith(scheme):
            s = s[len(scheme):]
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise KafkaProtocolError(f"bootstrap server {server!r} is not host:port")
    return host.strip("[]"), int(port)
