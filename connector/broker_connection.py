"""A blocking connection to one Kafka broker: TLS, SASL (PLAIN, SCRAM-SHA-256/512), API versions.

Why: the sink's driver talks to transaction coordinators directly (EndTxn, DescribeTransactions), so
it needs a client that honours the same ``kafka.*`` security settings as librdkafka on the data path.
Settings use librdkafka's names (``security.protocol``, ``sasl.mechanism``, ``ssl.ca.location``...).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import secrets
import socket
import ssl
import struct
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Mapping

from .errors import KafkaProtocolError, KafkaAuthenticationError, KafkaConfigError
from .kafka_wire import Reader, Writer, request_header

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

_SCRAM = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class SecurityConfig:
    """Security settings shared with librdkafka (librdkafka option names)."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "GSSAPI"
    sasl_username: str | None = field(default=None, repr=False)
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None
    ssl_ca_pem: str | None = field(default=None, repr=False)
    ssl_certificate_location: str | None = None
    ssl_certificate_pem: str | None = field(default=None, repr=False)
    ssl_key_location: str | None = None
    ssl_key_pem: str | None = field(default=None, repr=False)
    ssl_key_password: str | None = field(default=None, repr=False)
    verify_certificate: bool = True
    check_hostname: bool = True

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
        if protocol.startswith("SASL") and mech not in ("PLAIN", *_SCRAM):
            raise KafkaConfigError(
                f"kafka.sasl.mechanism={mech!r}: the transaction client supports PLAIN, "
                "SCRAM-SHA-256 and SCRAM-SHA-512"
            )
        if protocol.startswith("SASL") and (not get("sasl.username") or get("sasl.password") is None):
            raise KafkaConfigError(
                f"security.protocol {protocol} needs kafka.sasl.username and kafka.sasl.password"
            )
        if protocol in ("SSL", "SASL_SSL") and get("ssl.keystore.location"):
            # librdkafka would use it, this client cannot (Python's ssl reads PEM only): refuse
            # rather than connect without the client certificate.
            raise KafkaConfigError(
                "kafka.ssl.keystore.location (PKCS#12) is not supported by the driver's transaction "
                "client: give the client certificate and key as PEM instead, with "
                "kafka.ssl.certificate.location and kafka.ssl.key.location (convert with: openssl "
                "pkcs12 -in keystore.p12 -clcerts -nokeys -out cert.pem; openssl pkcs12 -in "
                "keystore.p12 -nocerts -out key.pem)"
            )
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
            ssl_certificate_location=get("ssl.certificate.location"),
            ssl_certificate_pem=get("ssl.certificate.pem"),
            ssl_key_location=get("ssl.key.location"),
            ssl_key_pem=get("ssl.key.pem"),
            ssl_key_password=get("ssl.key.password"),
            verify_certificate=verify,
            check_hostname=check_host,
        )

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL")

    def ssl_context(self) -> ssl.SSLContext:
        cafile = capath = None
        loc = self.ssl_ca_location
        if loc and loc.lower() != "probe":  # librdkafka's "probe": the system's CA store
            if os.path.isdir(loc):
                capath = loc  # librdkafka accepts a directory of hashed CA certificates too
            elif os.path.isfile(loc):
                cafile = loc
            else:
                raise KafkaConfigError(f"kafka.ssl.ca.location={loc!r} is not a file or directory")
        try:
            ctx = ssl.create_default_context(cafile=cafile, capath=capath, cadata=self.ssl_ca_pem)
        except (ssl.SSLError, OSError, ValueError) as e:
            raise KafkaConfigError(
                f"could not load the CA certificates of kafka.ssl.ca.location={loc!r} / "
                f"kafka.ssl.ca.pem: {type(e).__name__}: {e}"
            ) from None
        if not self.verify_certificate:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx.check_hostname = self.check_hostname
        if self.ssl_certificate_location or self.ssl_certificate_pem:
            self._load_client_cert(ctx)
        return ctx

    def _load_client_cert(self, ctx: ssl.SSLContext) -> None:
        # ssl.load_cert_chain reads files only: inline PEMs go through 0600 temp files, removed at once.
        tmp: list[str] = []
        try:
            def as_file(path: str | None, pem: str | None) -> str | None:
                if path or not pem:
                    return path
                fd, name = tempfile.mkstemp(prefix="txkafka-", suffix=".pem")
                with os.fdopen(fd, "w") as fh:
                    fh.write(pem)
                tmp.append(name)
                return name

            cert = as_file(self.ssl_certificate_location, self.ssl_certificate_pem)
            key = as_file(self.ssl_key_location, self.ssl_key_pem)
            try:
                ctx.load_cert_chain(cert, key, password=self.ssl_key_password)  # type: ignore[arg-type]
            except (ssl.SSLError, OSError) as e:
                raise KafkaConfigError(
                    f"could not load the client certificate/key (kafka.ssl.certificate.location="
                    f"{self.ssl_certificate_location!r}, kafka.ssl.key.location="
                    f"{self.ssl_key_location!r}): {type(e).__name__}: {e.args[-1] if e.args else e}. "
                    "Check that both are PEM and that kafka.ssl.key.password is the key's password "
                    "(a wrong one reads as 'PEM lib')"
                ) from None
        finally:
            for name in tmp:
                with contextlib.suppress(OSError):
                    os.unlink(name)


def error_name(code: int) -> str:
    """Kafka's name for a broker error code (librdkafka uses the same numbers)."""
    try:
        from confluent_kafka import KafkaError

        return KafkaError(code).name()
    except Exception:  # noqa: BLE001 - naming only
        return f"ERROR_{code}"


class BrokerConnection:
    """One authenticated socket to one broker; requests are serialised by a lock."""

    def __init__(
        self,
        host: str,
        port: int,
        security: SecurityConfig,
        *,
        timeout: float = 30.0,
        client_id: str = "txkafka",
    ) -> None:
        self.host = host
        self.port = port
        self.security = security
        self.timeout = timeout
        self.client_id = client_id
        self._sock: socket.socket | None = None
        self._correlation = 0
        self._lock = threading.Lock()
        self._connect_lock = threading.Lock()
        self.api_versions: dict[int, tuple[int, int]] = {}

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, {self.security.protocol})"

    # ------------------------------------------------------------------ set-up

    def connect(self) -> "BrokerConnection":
        if self._sock is not None:
            return self
        with self._connect_lock:
            if self._sock is None:
                self._connect()
        return self

    def _connect(self) -> None:
        # Config errors (CA file, client key) surface before any socket is opened.
        ctx = self.security.ssl_context() if self.security.uses_ssl else None
        try:
            raw = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as e:
            raise KafkaProtocolError(f"cannot connect to broker {self.host}:{self.port}: {e}") from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock: socket.socket = raw
        if ctx is not None:
            try:
                sock = ctx.wrap_socket(raw, server_hostname=self.host)
            except ssl.SSLError as e:
                raw.close()
                why = e.reason or str(e)
                detail = getattr(e, "verify_message", None)
                if detail:
                    why = f"{why} ({detail})"
                raise KafkaAuthenticationError(
                    f"TLS handshake with {self.host}:{self.port} failed: {why}. Check "
                    "kafka.ssl.ca.location (the CA that signed the broker certificate) and the "
                    "broker's host name (kafka.ssl.endpoint.identification.algorithm)."
                ) from None
            except OSError as e:
                raw.close()
                raise KafkaAuthenticationError(
                    f"TLS handshake with {self.host}:{self.port} failed: {e}"
                ) from None
        self._sock = sock
        try:
            self._negotiate_versions()
            if self.security.uses_sasl:
                self._authenticate()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def version_for(self, api_key: int, lo: int, hi: int) -> int:
        """Highest version both sides support within [lo, hi], or a clear error."""
        broker = self.api_versions.get(api_key)
        if broker is None or broker[1] < lo or broker[0] > hi:
            raise KafkaProtocolError(
                f"broker {self.host}:{self.port} does not support API {api_key} versions {lo}-{hi} "
                f"(it offers {broker}); txkafka needs Apache Kafka 3.0 or newer"
            )
        return min(hi, broker[1])

    def _negotiate_versions(self) -> None:
        body = Writer(True).string("txkafka").string("1").tags().build()
        # ApiVersions answers with response header v0 even at flexible versions.
        r = self._roundtrip(API_VERSIONS, 3, body, flexible_request=True, flexible_response=False)
        r.flexible = True
        err = r.int16()
        if err == 35:  # UNSUPPORTED_VERSION: broker older than 2.4; retry at v0
            r = self._roundtrip(API_VERSIONS, 0, b"", flexible_request=False, flexible_response=False)
            err = r.int16()
        if err:
            raise KafkaProtocolError(f"ApiVersions failed: {error_name(err)}")

        def one(rr: Reader) -> tuple[int, int, int]:
            key, lo, hi = rr.int16(), rr.int16(), rr.int16()
            rr.tags()
            return key, lo, hi

        self.api_versions = {k: (lo, hi) for k, lo, hi in r.array(one)}

    # -------------------------------------------------------------------- SASL

    def _authenticate(self) -> None:
        mech = self.security.sasl_mechanism
        v = self.version_for(SASL_HANDSHAKE, 1, 1)
        r = self.request(SASL_HANDSHAKE, v, Writer(False).string(mech).build(), flexible=False)
        err = r.int16()
        offered = r.array(lambda rr: rr.string())
        if err:
            raise KafkaAuthenticationError(
                f"broker {self.host}:{self.port} refused SASL mechanism {mech} "
                f"({error_name(err)}); it offers {offered}"
            )
        user = self.security.sasl_username or ""
        password = self.security.sasl_password or ""
        if mech == "PLAIN":
            self._sasl_step(b"\0" + user.encode() + b"\0" + password.encode())
            return
        self._scram(mech, user, password)

    def _sasl_step(self, payload: bytes) -> bytes:
        v = self.version_for(SASL_AUTHENTICATE, 0, 2)
        flexible = v >= 2
        body = Writer(flexible).bytes_(payload).tags().build()
        r = self.request(SASL_AUTHENTICATE, v, body, flexible=flexible)
        err = r.int16()
        msg = r.string()
        data = r.bytes_() or b""
        if err:
            raise KafkaAuthenticationError(
                f"SASL {self.security.sasl_mechanism} authentication of user "
                f"{self.security.sasl_username!r} at {self.host}:{self.port} failed: "
                f"{error_name(err)} ({msg or 'no detail'}). Check kafka.sasl.username/password."
            )
        return data

    def _scram(self, mech: str, user: str, password: str) -> None:
        nonce = base64.b64encode(secrets.token_bytes(18)).decode()
        first = scram_client_first(user, nonce)
        server_first = self._sasl_step(("n,," + first).encode()).decode()
        final, expected_server_final = scram_client_final(mech, password, first, server_first)
        server_final = self._sasl_step(final.encode()).decode()
        if server_final != expected_server_final:
            raise KafkaAuthenticationError("SCRAM: the server's signature did not verify")

    # --------------------------------------------------------------- requests

    def request(self, api_key: int, version: int, body: bytes, *, flexible: bool) -> Reader:
        """Send one request and return a reader positioned at the response body."""
        self.connect()
        return self._exchange([(api_key, version, body, flexible, flexible)])[0]

    def request_many(self, requests: list[tuple[int, int, bytes, bool]]) -> list[Reader]:
        """Pipeline several requests on this connection: one write, then the answers in order.

        Kafka answers a connection's requests in the order sent, and the broker works on them
        concurrently; a batch's EndTxn calls to one coordinator cost one round trip, not N.
        """
        self.connect()
        return self._exchange([(a, v, b, f, f) for a, v, b, f in requests])

    def _roundtrip(self, api_key: int, version: int, body: bytes, *, flexible_request: bool,
                   flexible_response: bool) -> Reader:
        return self._exchange([(api_key, version, body, flexible_request, flexible_response)])[0]

    def _exchange(self, requests: list[tuple[int, int, bytes, bool, bool]]) -> list[Reader]:
        assert self._sock is not None
        api_key = requests[0][0]
        with self._lock:
            frames = []
            cids = []
            for key, version, body, flex_req, _flex_resp in requests:
                self._correlation += 1
                cids.append(self._correlation)
                frame = request_header(key, version, self._correlation, self.client_id, flex_req) + body
                frames.append(struct.pack(">i", len(frame)) + frame)
            payloads = []
            try:
                self._sock.sendall(b"".join(frames))
                for _ in requests:
                    size = struct.unpack(">i", self._recv_exact(4))[0]
                    payloads.append(self._recv_exact(size))
            except ssl.SSLError as e:
                self.close()
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
            except (OSError, EOFError) as e:
                self.close()
                raise KafkaProtocolError(
                    f"connection to {self.host}:{self.port} failed during API {api_key}: "
                    f"{type(e).__name__}: {e}"
                ) from None
        readers = []
        for cid, payload, req in zip(cids, payloads, requests):
            r = Reader(payload, req[4])
            got = r.int32()
            if got != cid:
                self.close()
                raise KafkaProtocolError(f"correlation id mismatch: sent {cid}, got {got}")
            r.tags()
            readers.append(r)
        return readers

    def _recv_exact(self, n: int) -> bytes:
        assert self._sock is not None
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("broker closed the connection")
            buf.extend(chunk)
        return bytes(buf)


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
