"""OAUTHBEARER tokens for the driver's commit client, from the ``kafka.*`` options librdkafka takes.

Why: the tasks' producers get their token from librdkafka; the driver's commit client
(``connection``) logs in by itself and must present a token for the same principal. Two
token sources can be configured with string options, and both are implemented here as librdkafka
2.16 implements them:

- the unsecured JWT (``enable.sasl.oauthbearer.unsecure.jwt=true`` with ``sasl.oauthbearer.config``,
  e.g. ``principal=writer scope=a,b lifeSeconds=600 extension_traceId=1``): an unsigned JWS
  (``{"alg":"none"}``) whose claims are the principal, ``iat``, ``exp`` and the scope list;
  development and tests only, as librdkafka says;
- OIDC client credentials (``sasl.oauthbearer.method=oidc``): a POST of
  ``grant_type=client_credentials`` (plus ``scope``) to ``sasl.oauthbearer.token.endpoint.url`` with
  the client id and secret as HTTP basic authentication, the answer's ``access_token`` used as is.
  librdkafka 2.16 needs that token to be a JWT with an ``exp`` claim and the subject claim
  (``sasl.oauthbearer.sub.claim.name``, default ``sub``); so does this client. A token is reused
  until 80 % of its lifetime has passed (librdkafka's refresh point), or until a broker refuses it.

Other forms (the jwt-bearer grant and its ``sasl.oauthbearer.assertion.*`` settings, cloud metadata
authentication, no token source at all) raise KafkaConfigError naming the options.

No token, client secret or ``sasl.oauthbearer.config`` value ever appears in a repr, log or error.
This module never imports pyspark.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Callable

from ..errors import KafkaAuthenticationError, KafkaConfigError, KafkaProtocolError
from ..secrets_redaction import REDACTED, redact_uri
from .tls import trust_context

# base64url of {"alg":"none"}: the JOSE header of an unsecured JWS (RFC 7515 appendix A.5).
_UNSECURED_HEADER = "eyJhbGciOiJub25lIn0"
_DEFAULT_LIFE_S = 3600
_INT_MAX = 2**31 - 1
# A token is fetched again once this share of its lifetime has passed (librdkafka's refresh point).
REFRESH_FRACTION = 0.8
# RFC 7628 section 3.1: key = 1*ALPHA; value = *(VCHAR / SP / HTAB / CR / LF); "auth" is reserved.
_EXT_KEY = re.compile(r"[A-Za-z]+")
_EXT_VALUE = re.compile(r"[\x21-\x7e \t\r\n]*")
_TRUE = ("true", "t", "1")
_FALSE = ("false", "f", "0")

_Get = Callable[[str], "str | None"]


@dataclass(frozen=True)
class OAuthBearerToken:
    """A bearer token and what the client needs to know about it (never its value in a repr)."""

    value: str = field(repr=False)
    principal: str
    lifetime_s: float  # seconds from when it was obtained until it expires
    obtained_at: float  # time.monotonic() when it was obtained
    extensions: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def refresh_at(self) -> float:
        """Monotonic time after which a new token is fetched instead of reusing this one."""
        return self.obtained_at + REFRESH_FRACTION * self.lifetime_s


def client_first_message(token: str, extensions: tuple[tuple[str, str], ...] = ()) -> bytes:
    """The SASL OAUTHBEARER client's first message (RFC 7628 section 3.1, KIP-255/KIP-342):
    ``n,,`` ^A ``auth=Bearer <token>`` ^A, then ``key=value`` ^A per extension, then ^A."""
    parts = ["n,,", "\x01", f"auth=Bearer {token}", "\x01"]
    for key, value in extensions:
        parts.append(f"{key}={value}\x01")
    parts.append("\x01")
    return "".join(parts).encode("utf-8")


# After a server error message the client answers with a lone ^A (RFC 7628 section 3.2.3).
CLIENT_ERROR_ACK = b"\x01"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _check_extensions(pairs: list[tuple[str, str]], option: str) -> tuple[tuple[str, str], ...]:
    seen: set[str] = set()
    for key, value in pairs:
        if not _EXT_KEY.fullmatch(key) or key == "auth":
            raise KafkaConfigError(
                f"{option}: SASL extension name {key!r} is not allowed (letters only, and not "
                "'auth'; RFC 7628)")
        if not _EXT_VALUE.fullmatch(value):
            raise KafkaConfigError(
                f"{option}: the value of SASL extension {key!r} has characters RFC 7628 does not "
                "allow (printable ASCII, space, tab, CR, LF)")
        if key in seen:
            raise KafkaConfigError(f"{option}: SASL extension {key!r} is given twice")
        seen.add(key)
    return tuple(pairs)


# ------------------------------------------------------------------------------ unsecured JWT


@dataclass(frozen=True)
class UnsecuredJwtSource:
    """librdkafka's built-in unsecured JWT token handler, from ``kafka.sasl.oauthbearer.config``.

    Recognised entries (space-separated, as librdkafka): ``principal=`` (required),
    ``principalClaimName=`` (default ``sub``), ``scope=`` (comma-separated), ``scopeClaimName=``
    (default ``scope``), ``lifeSeconds=`` (default 3600) and ``extension_<name>=<value>``.
    """

    principal: str
    principal_claim_name: str = "sub"
    scope: tuple[str, ...] = ()
    scope_claim_name: str = "scope"
    life_seconds: int = _DEFAULT_LIFE_S
    extensions: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    clock: Callable[[], float] = field(default=time.time, repr=False, compare=False)

    source_name = "librdkafka's unsecured JWT (kafka.sasl.oauthbearer.config)"
    check_hint = ("Check kafka.sasl.oauthbearer.config (principal=..., scope=..., lifeSeconds=...) "
                  "and that the brokers' OAUTHBEARER listener accepts unsecured JWTs (Kafka's "
                  "default validator, for development only)")

    @classmethod
    def parse(cls, config: str, clock: Callable[[], float] = time.time) -> "UnsecuredJwtSource":
        """Parse ``sasl.oauthbearer.config``. Errors name the entry, never its value."""
        opt = "kafka.sasl.oauthbearer.config"
        single = {"principalClaimName": None, "principal": None, "scopeClaimName": None,
                  "scope": None, "lifeSeconds": None}
        extensions: list[tuple[str, str]] = []
        for entry in config.split(" "):
            if not entry:
                continue
            name, eq, value = entry.partition("=")
            if name.startswith("extension_") and eq:
                ext = name[len("extension_"):]
                if not ext:
                    raise KafkaConfigError(f"{opt}: an extension_ entry has an empty name")
                extensions.append((ext, value))
                continue
            if name not in single or not eq:
                raise KafkaConfigError(
                    f"{opt}: unrecognized entry (the value is not shown: the option is a secret). "
                    "librdkafka's unsecured JWT takes space-separated principal=, "
                    "principalClaimName=, scope=, scopeClaimName=, lifeSeconds= and "
                    "extension_<name>= entries")
            if single[name] is not None:
                raise KafkaConfigError(f"{opt}: '{name}' is given more than once")
            if not value:
                raise KafkaConfigError(f"{opt}: '{name}' is empty")
            single[name] = value
        principal = single["principal"]
        if principal is None:
            raise KafkaConfigError(
                f"{opt} has no principal=<name>: the unsecured JWT's subject, the Kafka principal "
                "User:<name> the ACLs are for (e.g. 'principal=writer')")
        for key in ("principal", "principalClaimName", "scopeClaimName", "scope"):
            if single[key] is not None and '"' in single[key]:  # type: ignore[operator]
                raise KafkaConfigError(f"{opt}: '{key}' cannot contain a '\"' character")
        life = _DEFAULT_LIFE_S
        if single["lifeSeconds"] is not None:
            try:
                life = int(single["lifeSeconds"], 10)
            except ValueError:
                raise KafkaConfigError(f"{opt}: lifeSeconds is not an integer") from None
            if not 0 < life <= _INT_MAX:
                raise KafkaConfigError(f"{opt}: lifeSeconds must be a positive int")
        scope: list[str] = []
        for item in (single["scope"] or "").split(","):
            if item and item not in scope:  # empty elements dropped, duplicates once (librdkafka)
                scope.append(item)
        return cls(
            principal=principal,
            principal_claim_name=single["principalClaimName"] or "sub",
            scope=tuple(scope),
            scope_claim_name=single["scopeClaimName"] or "scope",
            life_seconds=life,
            extensions=_check_extensions(extensions, opt),
            clock=clock,
        )

    def jwt(self, now: float | None = None) -> str:
        """The unsigned JWS librdkafka builds: claims ``{"<principalClaimName>": principal,
        "iat": now, "exp": now + lifeSeconds[, "<scopeClaimName>": [scope...]]}`` with times as
        seconds to the millisecond, header ``{"alg":"none"}``, empty signature."""
        now = self.clock() if now is None else now
        now = int(now * 1000) / 1000.0  # librdkafka: wall clock in whole milliseconds
        enc = lambda s: json.dumps(s, ensure_ascii=False)  # noqa: E731
        claims = (f'{{{enc(self.principal_claim_name)}:{enc(self.principal)},'
                  f'"iat":{now:.3f},"exp":{now + self.life_seconds:.3f}')
        if self.scope:
            claims += f',{enc(self.scope_claim_name)}:[{",".join(enc(s) for s in self.scope)}]'
        claims += "}"
        return f"{_UNSECURED_HEADER}.{_b64url(claims.encode('utf-8'))}."

    def token(self, deadline: float | None = None) -> OAuthBearerToken:
        del deadline  # nothing to wait for
        return OAuthBearerToken(self.jwt(), self.principal, float(self.life_seconds),
                                time.monotonic(), self.extensions)

    def invalidate(self, token: OAuthBearerToken) -> None:
        """Nothing cached: each login builds a fresh token."""


# ------------------------------------------------------------------------------ OIDC


class OidcClientCredentialsSource:
    """Tokens from an OAuth 2 token endpoint with the client credentials grant, as librdkafka's
    ``sasl.oauthbearer.method=oidc`` gets them, cached until 80 % of their lifetime has passed.

    Thread-safe: one fetch at a time; concurrent logins share its result.
    """

    def __init__(self, *, client_id: str, client_secret: str, token_endpoint_url: str,
                 scope: str | None = None, extensions: tuple[tuple[str, str], ...] = (),
                 sub_claim_name: str = "sub", ca_location: str | None = None,
                 ca_pem: str | None = None, timeout_s: float = 10.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.client_id = client_id
        self._client_secret = client_secret
        self.token_endpoint_url = token_endpoint_url
        self.scope = scope
        self.extensions = extensions
        self.sub_claim_name = sub_claim_name
        self.ca_location = ca_location
        self._ca_pem = ca_pem
        self.timeout_s = timeout_s
        self.clock = clock
        self._lock = threading.Lock()
        self._cached: OAuthBearerToken | None = None
        self.fetches = 0  # tokens fetched so far (for tests and logs)

    def __repr__(self) -> str:
        return (f"OidcClientCredentialsSource(client_id={self.client_id!r}, "
                f"token_endpoint_url={redact_uri(self.token_endpoint_url)!r})")

    @property
    def source_name(self) -> str:
        return f"the OIDC token endpoint {self._where}"

    @property
    def check_hint(self) -> str:
        return ("Check kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret, "
                "kafka.sasl.oauthbearer.token.endpoint.url and kafka.sasl.oauthbearer.scope, and "
                "that the brokers' OAUTHBEARER listener validates this identity provider's tokens")

    @property
    def _where(self) -> str:
        return redact_uri(self.token_endpoint_url)

    def token(self, deadline: float | None = None) -> OAuthBearerToken:
        with self._lock:
            cached = self._cached
            if cached is not None and time.monotonic() < cached.refresh_at:
                return cached
            token = self._fetch(deadline)
            self._cached = token
            return token

    def invalidate(self, token: OAuthBearerToken) -> None:
        """Forget ``token`` (a broker refused it): the next login fetches a new one."""
        with self._lock:
            if self._cached is token:
                self._cached = None

    # ---------------------------------------------------------------- fetching

    def _ssl_context(self) -> ssl.SSLContext:
        return trust_context(self.ca_location, self._ca_pem,
                             location_option="kafka.https.ca.location",
                             pem_option="kafka.https.ca.pem",
                             purpose=" (to verify the token endpoint)")

    def _redact(self, text: str) -> str:
        basic = base64.b64encode(f"{self.client_id}:{self._client_secret}".encode()).decode()
        for secret in (self._client_secret, basic):
            if secret and len(secret) >= 3:
                text = text.replace(secret, REDACTED)
        return text

    def _fetch(self, deadline: float | None) -> OAuthBearerToken:
        timeout = self.timeout_s
        if deadline is not None:
            timeout = min(timeout, deadline - time.monotonic())
            if timeout <= 0:
                raise KafkaProtocolError(
                    f"no time left to fetch an OAUTHBEARER token from {self._where}: the call's "
                    "timeout ran out")
        form = {"grant_type": "client_credentials"}
        if self.scope:
            form["scope"] = self.scope
        basic = base64.b64encode(f"{self.client_id}:{self._client_secret}".encode("utf-8"))
        request = urllib.request.Request(
            self.token_endpoint_url, data=urllib.parse.urlencode(form).encode("ascii"),
            method="POST", headers={
                "Accept": "application/json",
                "Content-Type": "application/x-www-form-urlencoded",
                "Authorization": "Basic " + basic.decode("ascii"),
            })
        https = self.token_endpoint_url.lower().startswith("https")
        context = self._ssl_context() if https else None
        started = time.monotonic()
        try:
            with _opener(context).open(request, timeout=timeout) as response:
                body = response.read(1 << 20)
        except urllib.error.HTTPError as e:
            detail = _error_detail(e)
            status = e.code
            e.close()
            text = (f"the OIDC token endpoint {self._where} refused the client credentials request "
                    f"of client id {self.client_id!r}: HTTP {status}{detail}. ")
            if status >= 500 or status in (408, 429):
                raise KafkaProtocolError(self._redact(
                    text + "The identity provider may be overloaded or down.")) from None
            raise KafkaAuthenticationError(self._redact(f"{text}{self.check_hint}.")) from None
        except urllib.error.URLError as e:
            reason = e.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise KafkaAuthenticationError(
                    f"TLS handshake with the OIDC token endpoint {self._where} failed: "
                    f"{reason.verify_message or reason.reason}. Check kafka.https.ca.location / "
                    "kafka.https.ca.pem (the CA of the token endpoint; default: the system's CA "
                    "store)") from None
            raise KafkaProtocolError(self._redact(
                f"cannot reach the OIDC token endpoint {self._where}: "
                f"{type(reason).__name__}: {reason}")) from None
        except (TimeoutError, socket.timeout):
            raise KafkaProtocolError(
                f"the OIDC token endpoint {self._where} did not answer within {timeout:.3g}s"
            ) from None
        except OSError as e:
            raise KafkaProtocolError(self._redact(
                f"cannot reach the OIDC token endpoint {self._where}: {type(e).__name__}: {e}"
            )) from None
        self.fetches += 1
        return self._parse(body, started)

    def _parse(self, body: bytes, started: float) -> OAuthBearerToken:
        what = f"the OIDC token endpoint {self._where}"
        try:
            doc = json.loads(body)
        except ValueError:
            raise KafkaAuthenticationError(
                f"{what} answered with something that is not JSON; expected "
                '{"access_token": ...}. Check kafka.sasl.oauthbearer.token.endpoint.url') from None
        token = doc.get("access_token") if isinstance(doc, dict) else None
        if not isinstance(token, str) or not token:
            raise KafkaAuthenticationError(
                f"{what} answered without an access_token. Check "
                "kafka.sasl.oauthbearer.token.endpoint.url")
        claims = decode_jwt_claims(token)
        if claims is None:
            raise KafkaAuthenticationError(
                f"the access token from {what} is not a JWT; librdkafka (the tasks' producers) "
                "needs a JWT with 'exp' and subject claims, and so does the commit client")
        principal = claims.get(self.sub_claim_name)
        if not isinstance(principal, str) or not principal.strip():
            raise KafkaAuthenticationError(
                f"the access token from {what} has no {self.sub_claim_name!r} claim (the "
                "principal); set kafka.sasl.oauthbearer.sub.claim.name to the claim that holds it")
        exp = claims.get("exp")
        if isinstance(exp, bool) or not isinstance(exp, (int, float)):
            raise KafkaAuthenticationError(
                f"the access token from {what} has no numeric 'exp' claim")
        lifetime = float(exp) - self.clock()
        expires_in = doc.get("expires_in")
        if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool):
            lifetime = min(lifetime, float(expires_in))
        if lifetime <= 0:
            raise KafkaAuthenticationError(
                f"the access token from {what} has already expired (exp is in the past: is the "
                "clock of this host or of the identity provider wrong?)")
        return OAuthBearerToken(token, principal, lifetime, started, self.extensions)


def _opener(context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    """urllib's default handlers (proxies from the environment, as librdkafka's curl) except
    redirects: none is followed, so the client secret goes to the configured URL only."""

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return None

    handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def _error_detail(e: urllib.error.HTTPError) -> str:
    """The identity provider's OAuth error (RFC 6749 5.2: error, error_description), if any."""
    try:
        doc = json.loads(e.read(64 * 1024))
    except (ValueError, OSError):
        return ""
    if not isinstance(doc, dict):
        return ""
    parts = [str(doc[k])[:300] for k in ("error", "error_description") if doc.get(k)]
    return f" ({': '.join(parts)})" if parts else ""


def decode_jwt_claims(token: str) -> dict | None:
    """The claims (payload) of a JWT, without checking any signature; None if not a JWT."""
    pieces = token.split(".")
    if len(pieces) != 3:
        return None
    try:
        claims = json.loads(_b64url_decode(pieces[1]))
    except (ValueError, binascii.Error):
        return None
    return claims if isinstance(claims, dict) else None


# ------------------------------------------------------------------------------ configuration

# librdkafka 2.16 settings of token sources the commit client does not implement.
_UNSUPPORTED_OIDC = ("sasl.oauthbearer.assertion.algorithm", "sasl.oauthbearer.assertion.file",
                     "sasl.oauthbearer.assertion.private.key.file",
                     "sasl.oauthbearer.assertion.private.key.pem",
                     "sasl.oauthbearer.assertion.private.key.passphrase",
                     "sasl.oauthbearer.assertion.jwt.template.file",
                     "sasl.oauthbearer.assertion.claim.aud", "sasl.oauthbearer.assertion.claim.iss",
                     "sasl.oauthbearer.assertion.claim.sub",
                     "sasl.oauthbearer.assertion.claim.jti.include",
                     "sasl.oauthbearer.assertion.claim.exp.seconds",
                     "sasl.oauthbearer.assertion.claim.nbf.seconds")


def _bool(get: _Get, key: str) -> bool:
    raw = get(key)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise KafkaConfigError(f"kafka.{key}={raw!r} is not true or false")


def _alias(get: _Get, key: str, alias: str) -> str | None:
    a, b = get(key), get(alias)
    if a is not None and b is not None and a != b:
        raise KafkaConfigError(f"options 'kafka.{key}' and 'kafka.{alias}' are the same setting "
                               "for librdkafka and disagree; keep one")
    return a if a is not None else b


def parse_extensions(text: str) -> tuple[tuple[str, str], ...]:
    """``sasl.oauthbearer.extensions``: comma-separated ``key=value`` pairs (librdkafka)."""
    opt = "kafka.sasl.oauthbearer.extensions"
    pairs = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        if not eq:
            raise KafkaConfigError(f"{opt}: every entry must be key=value, separated by commas")
        pairs.append((key.strip(), value))
    return _check_extensions(pairs, opt)


def token_source_from_config(get: _Get) -> "UnsecuredJwtSource | OidcClientCredentialsSource":
    """The token source the ``kafka.*`` settings (librdkafka names, ``get(key)``) configure for
    ``sasl.mechanism=OAUTHBEARER``, or a KafkaConfigError naming the options to set or remove."""
    unsecure = _bool(get, "enable.sasl.oauthbearer.unsecure.jwt")
    method = (get("sasl.oauthbearer.method") or "default").strip().lower()
    if method not in ("default", "oidc"):
        raise KafkaConfigError(
            f"kafka.sasl.oauthbearer.method={get('sasl.oauthbearer.method')!r} is not 'default' or "
            "'oidc'")
    metadata = (get("sasl.oauthbearer.metadata.authentication.type") or "none").strip().lower()
    if metadata != "none":
        raise KafkaConfigError(
            f"kafka.sasl.oauthbearer.metadata.authentication.type={metadata!r}: the exactly-once "
            "sink's commit client (which logs in by itself on the driver) gets OAUTHBEARER tokens "
            "from kafka.sasl.oauthbearer.method=oidc with client credentials "
            "(kafka.sasl.oauthbearer.client.id, .client.secret, .token.endpoint.url) or from "
            "kafka.enable.sasl.oauthbearer.unsecure.jwt=true, not from cloud metadata; use one of "
            "those, or the at_least_once sink (deliveryGuarantee=at_least_once)")
    if unsecure and method == "oidc":
        raise KafkaConfigError(
            "kafka.enable.sasl.oauthbearer.unsecure.jwt=true and "
            "kafka.sasl.oauthbearer.method=oidc are mutually exclusive (librdkafka refuses them "
            "too); keep one")
    if method == "oidc":
        return _oidc_from_config(get)
    if unsecure:
        config = get("sasl.oauthbearer.config")
        if not config or not config.strip():
            raise KafkaConfigError(
                "kafka.enable.sasl.oauthbearer.unsecure.jwt=true needs "
                "kafka.sasl.oauthbearer.config with at least principal=<name> (e.g. "
                "'principal=writer scope=kafka lifeSeconds=3600')")
        return UnsecuredJwtSource.parse(config)
    raise KafkaConfigError(
        "kafka.sasl.mechanism=OAUTHBEARER without a token source the exactly-once sink's commit "
        "client can use: set kafka.sasl.oauthbearer.method=oidc with "
        "kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret and "
        "kafka.sasl.oauthbearer.token.endpoint.url (client credentials), or, for development only, "
        "kafka.enable.sasl.oauthbearer.unsecure.jwt=true with kafka.sasl.oauthbearer.config="
        "'principal=<name>'. A token refresh callback (oauth_cb) cannot be passed as a Spark "
        "option")


def _oidc_from_config(get: _Get) -> OidcClientCredentialsSource:
    grant = (get("sasl.oauthbearer.grant.type") or "client_credentials").strip()
    assertion = [f"kafka.{k}" for k in _UNSUPPORTED_OIDC if get(k) is not None]
    if grant != "client_credentials" or assertion:
        named = ", ".join(([f"kafka.sasl.oauthbearer.grant.type={grant!r}"]
                           if grant != "client_credentials" else []) + assertion)
        raise KafkaConfigError(
            f"{named}: the exactly-once sink's commit client supports the OIDC client credentials "
            "grant only (kafka.sasl.oauthbearer.client.id and "
            "kafka.sasl.oauthbearer.client.secret), not the jwt-bearer grant with a signed "
            "assertion; use client credentials, or the at_least_once sink "
            "(deliveryGuarantee=at_least_once), which leaves OAUTHBEARER to librdkafka")
    client_id = _alias(get, "sasl.oauthbearer.client.id",
                       "sasl.oauthbearer.client.credentials.client.id")
    secret = _alias(get, "sasl.oauthbearer.client.secret",
                    "sasl.oauthbearer.client.credentials.client.secret")
    url = get("sasl.oauthbearer.token.endpoint.url")
    missing = [f"kafka.{k}" for k, v in (("sasl.oauthbearer.client.id", client_id),
                                         ("sasl.oauthbearer.client.secret", secret),
                                         ("sasl.oauthbearer.token.endpoint.url", url)) if not v]
    if missing:
        raise KafkaConfigError(
            f"kafka.sasl.oauthbearer.method=oidc needs {', '.join(missing)} (librdkafka requires "
            "them too)")
    assert client_id is not None and secret is not None and url is not None
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise KafkaConfigError(
            f"kafka.sasl.oauthbearer.token.endpoint.url={redact_uri(url)!r} is not an http(s) URL")
    ca_location, ca_pem = get("https.ca.location"), get("https.ca.pem")
    if ca_location and ca_pem:
        raise KafkaConfigError("kafka.https.ca.location and kafka.https.ca.pem are mutually "
                               "exclusive (librdkafka refuses both too); keep one")
    sub_claim = get("sasl.oauthbearer.sub.claim.name")
    if sub_claim is not None and not sub_claim.strip():
        raise KafkaConfigError("kafka.sasl.oauthbearer.sub.claim.name is empty")
    return OidcClientCredentialsSource(
        client_id=client_id, client_secret=secret, token_endpoint_url=url,
        scope=get("sasl.oauthbearer.scope") or None,
        extensions=parse_extensions(get("sasl.oauthbearer.extensions") or ""),
        sub_claim_name=(sub_claim or "sub").strip(), ca_location=ca_location, ca_pem=ca_pem)
