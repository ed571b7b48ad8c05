"""OAUTHBEARER for the driver's commit client, without a broker: tokens, the SASL message, OIDC.

The unsecured JWT must be the one librdkafka builds (the tasks' producers use librdkafka's; the
driver's must name the same principal); the OIDC client credentials request must be what librdkafka
2.16 sends (checked against librdkafka itself: HTTP basic authentication with the raw client id and
secret, grant_type=client_credentials and the scope as a form). A local http.server plays the
identity provider, a fake broker the OAUTHBEARER listener. No secret may reach a message or repr.
"""

from __future__ import annotations

import base64
import json
import ssl
import time

import pytest

from tests.http_stub import serve_json_posts
from tests.test_coordinator_client_failures import (
    DESCRIBE_TRANSACTIONS,
    SASL_AUTHENTICATE,
    FakeBroker,
    Writer,
)
from tests.tls_certs import self_signed
from txkafka.connector.client.connection import BrokerConnection, SecurityConfig
from txkafka.connector.errors import (
    KafkaAuthenticationError,
    KafkaConfigError,
    KafkaProtocolError,
)
from txkafka.connector.client.oauthbearer import (
    OidcClientCredentialsSource,
    UnsecuredJwtSource,
    client_first_message,
    decode_jwt_claims,
    parse_extensions,
    token_source_from_config,
)
from txkafka.connector.client.transactions import TransactionClient

SECRET = "cl1ent-S3cret:with&odd=chars+"
CLIENT_ID = "txkafka writer"


def _b64url(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def unsigned_jwt(claims: dict) -> str:
    return f"{_b64url({'alg': 'none'})}.{_b64url(claims)}."


def _no_secret(text: str, *secrets: str) -> None:
    for s in (SECRET, *secrets):
        assert s not in text, text


# ------------------------------------------------------------------------------ unsecured JWT


def test_unsecured_jwt_is_byte_for_byte_librdkafkas():
    """librdkafka's own unit test vector (rdkafka_sasl_oauthbearer.c, at wall clock 1 s)."""
    src = UnsecuredJwtSource.parse("principal=fubar scope=role1,role2 lifeSeconds=60")
    assert src.jwt(now=1.0) == (
        "eyJhbGciOiJub25lIn0.eyJzdWIiOiJmdWJhciIsImlhdCI6MS4wMDAsImV4cCI6NjEuMDAwLCJzY29wZSI6WyJyb2"
        "xlMSIsInJvbGUyIl19.")


def test_unsecured_jwt_claims_names_lifetime_and_extensions():
    src = UnsecuredJwtSource.parse(
        "  principalClaimName=azp principal=writer scopeClaimName=roles scope=a,,b,a "
        "lifeSeconds=600 extension_traceId=42 extension_tenant=blue", clock=lambda: 1700000000.25)
    header, claims, signature = src.jwt().split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"}
    assert signature == ""
    assert decode_jwt_claims(src.jwt()) == {"azp": "writer", "iat": 1700000000.25,
                                            "exp": 1700000600.25, "roles": ["a", "b"]}
    tok = src.token()
    assert tok.principal == "writer" and tok.lifetime_s == 600
    assert tok.extensions == (("traceId", "42"), ("tenant", "blue"))
    # Defaults: sub, no scope claim, an hour.
    plain = decode_jwt_claims(UnsecuredJwtSource.parse("principal=w").jwt(now=10.0))
    assert plain == {"sub": "w", "iat": 10.0, "exp": 3610.0}


@pytest.mark.parametrize("config, match", [
    ("scope=a", "no principal"),
    ("principal=a principal=b", "more than once"),
    ("principal=a lifeSeconds=ten", "not an integer"),
    ("principal=a lifeSeconds=0", "positive"),
    ("principal=", "'principal' is empty"),
    ('principal=a"b', "cannot contain"),
    ("principal=a extension_auth=x", "not allowed"),
    ("principal=a extension_tr4ce=x", "not allowed"),
    ("principal=a s3cr3tGarbage", "unrecognized entry"),
])
def test_unsecured_jwt_config_errors_name_the_entry_not_the_value(config, match):
    with pytest.raises(KafkaConfigError, match=match) as info:
        UnsecuredJwtSource.parse(config)
    assert "s3cr3tGarbage" not in str(info.value)
    assert "kafka.sasl.oauthbearer.config" in str(info.value)


def test_client_first_message_is_rfc7628_with_extensions():
    assert client_first_message("abc.def.") == b"n,,\x01auth=Bearer abc.def.\x01\x01"
    assert client_first_message("t", (("traceId", "42"), ("x", "a b"))) == (
        b"n,,\x01auth=Bearer t\x01traceId=42\x01x=a b\x01\x01")


def test_oidc_extensions_option_is_comma_separated_pairs():
    assert parse_extensions("supportFeatureX=true,organizationId=sales-emea") == (
        ("supportFeatureX", "true"), ("organizationId", "sales-emea"))
    assert parse_extensions("") == ()
    with pytest.raises(KafkaConfigError, match="key=value"):
        parse_extensions("novalue")


# ------------------------------------------------------------------------------ configuration

_OIDC = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
         "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": CLIENT_ID,
         "sasl.oauthbearer.client.secret": SECRET,
         "sasl.oauthbearer.token.endpoint.url": "https://idp.example/oauth2/token"}


@pytest.mark.parametrize("conf, match", [
    ({"sasl.oauthbearer.method": None}, "without a token source"),
    ({"sasl.oauthbearer.method": "default", "sasl.oauthbearer.config": "principal=x"},
     "enable.sasl.oauthbearer.unsecure.jwt=true"),
    ({"enable.sasl.oauthbearer.unsecure.jwt": "true"}, "mutually exclusive"),
    ({"sasl.oauthbearer.grant.type": "urn:ietf:params:oauth:grant-type:jwt-bearer"},
     "client credentials grant only"),
    ({"sasl.oauthbearer.assertion.private.key.file": "/k.pem"},
     "kafka.sasl.oauthbearer.assertion.private.key.file"),
    ({"sasl.oauthbearer.metadata.authentication.type": "azure_imds"}, "metadata"),
    ({"sasl.oauthbearer.client.secret": None}, "needs kafka.sasl.oauthbearer.client.secret"),
    ({"sasl.oauthbearer.token.endpoint.url": None, "sasl.oauthbearer.client.id": None},
     "needs kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.token.endpoint.url"),
    ({"sasl.oauthbearer.token.endpoint.url": "file:///etc/passwd"}, "not an http"),
    ({"https.ca.location": "/ca.pem", "https.ca.pem": "PEM"}, "mutually exclusive"),
    ({"sasl.oauthbearer.method": "aws"}, "'default' or 'oidc'"),
    ({"sasl.oauthbearer.client.credentials.client.secret": "other"}, "disagree"),
    ({"enable.sasl.oauthbearer.unsecure.jwt": "maybe", "sasl.oauthbearer.method": None},
     "not true or false"),
])
def test_oauthbearer_forms_the_commit_client_cannot_use_are_refused_naming_options(conf, match):
    full = {k: v for k, v in {**_OIDC, **conf}.items() if v is not None}
    with pytest.raises(KafkaConfigError, match=match) as info:
        SecurityConfig.from_kafka_config(full)
    _no_secret(str(info.value), "other")


def test_gssapi_is_still_refused():
    with pytest.raises(KafkaConfigError, match="OAUTHBEARER"):
        SecurityConfig.from_kafka_config({"security.protocol": "SASL_SSL",
                                          "sasl.mechanism": "GSSAPI"})


def test_oauthbearer_needs_no_username_and_keeps_secrets_out_of_reprs():
    sec = SecurityConfig.from_kafka_config(_OIDC)
    assert isinstance(sec.oauthbearer, OidcClientCredentialsSource)
    assert sec.oauthbearer.client_id == CLIENT_ID and sec.oauthbearer.sub_claim_name == "sub"
    unsecured = SecurityConfig.from_kafka_config({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": "principal=writer extension_k=S3cretExtValue"})
    assert isinstance(unsecured.oauthbearer, UnsecuredJwtSource)
    tok = unsecured.oauthbearer.token()
    with TransactionClient({"bootstrap.servers": "h:9092", **_OIDC}) as tc:
        texts = [repr(sec), repr(sec.oauthbearer), repr(unsecured), repr(unsecured.oauthbearer),
                 repr(tok), repr(tc), repr(BrokerConnection("h", 1, sec))]
    for text in texts:
        _no_secret(text, "S3cretExtValue", tok.value)
    assert "writer" in repr(unsecured.oauthbearer)  # the principal is no secret


# ------------------------------------------------------------------------------ OIDC endpoint


class IdentityProvider:
    """A token endpoint: records each request; ``answer(request_no) -> (status, body)``."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[dict] = []
        self.answer = lambda n: (200, {"access_token": self.jwt(), "token_type": "bearer",
                                       "expires_in": 3600})
        self.lifetime = 3600.0
        self.sub = "writer"
        self.server = serve_json_posts(self._record, tls, poll_interval=0.02)
        scheme = "https" if tls else "http"
        host = "localhost" if tls else "127.0.0.1"
        self.url = f"{scheme}://{host}:{self.server.server_port}/oauth2/token"

    def _record(self, path: str, headers: dict, form: dict) -> tuple[int, dict | bytes]:
        self.requests.append({"path": path, "headers": headers, "form": form})
        return self.answer(len(self.requests))

    def jwt(self) -> str:
        now = time.time()
        return unsigned_jwt({"sub": self.sub, "iat": now, "exp": now + self.lifetime})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def idp():
    p = IdentityProvider()
    yield p
    p.close()


def _oidc(url: str, **kw) -> OidcClientCredentialsSource:
    return OidcClientCredentialsSource(client_id=CLIENT_ID, client_secret=SECRET,
                                       token_endpoint_url=url, **kw)


def test_oidc_request_is_librdkafkas_and_the_token_is_cached(idp):
    src = token_source_from_config({**_OIDC, "sasl.oauthbearer.token.endpoint.url": idp.url,
                                    "sasl.oauthbearer.scope": "kafka write",
                                    "sasl.oauthbearer.extensions": "tenant=blue"}.get)
    tok = src.token()
    assert tok.principal == "writer" and 3590 < tok.lifetime_s <= 3600
    assert tok.extensions == (("tenant", "blue"),)
    assert src.token() is tok and len(idp.requests) == 1  # cached
    req = idp.requests[0]
    assert req["path"] == "/oauth2/token"
    assert req["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    assert req["headers"]["Accept"] == "application/json"
    auth = req["headers"]["Authorization"]
    assert auth.startswith("Basic ")
    assert base64.b64decode(auth[6:]).decode() == f"{CLIENT_ID}:{SECRET}"  # raw, as librdkafka
    assert req["form"] == {"grant_type": ["client_credentials"], "scope": ["kafka write"]}


def test_oidc_without_scope_sends_only_the_grant_type(idp):
    _oidc(idp.url).token()
    assert idp.requests[0]["form"] == {"grant_type": ["client_credentials"]}


@pytest.fixture
def clock_ahead(monkeypatch):
    """Moves time.monotonic forward on demand: a token's or a session's life passes without
    sleeping, and no pause of a loaded machine can make it pass too early."""
    real = time.monotonic
    ahead = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: real() + ahead[0])

    def move(seconds: float) -> None:
        ahead[0] += seconds

    return move


def test_oidc_token_is_fetched_again_after_80_percent_of_its_life_or_when_refused(idp,
                                                                                 clock_ahead):
    idp.lifetime = 100.0
    src = _oidc(idp.url)
    first = src.token()
    clock_ahead(79)
    assert src.token() is first
    clock_ahead(2)
    second = src.token()
    assert second is not first and len(idp.requests) == 2
    src.invalidate(second)  # a broker refused it
    assert src.token() is not second and len(idp.requests) == 3


def test_oidc_expires_in_shorter_than_exp_wins(idp):
    idp.answer = lambda n: (200, {"access_token": idp.jwt(), "expires_in": 60})
    assert _oidc(idp.url).token().lifetime_s <= 60


@pytest.mark.parametrize("status, doc, error, match", [
    (401, {"error": "invalid_client", "error_description": "Client authentication failed"},
     KafkaAuthenticationError, "HTTP 401 \\(invalid_client: Client authentication failed\\)"),
    (400, b"<html>bad</html>", KafkaAuthenticationError, "HTTP 400"),
    (401, {"error": "invalid_client", "error_description": f"secret {SECRET} is wrong"},
     KafkaAuthenticationError, "invalid_client: secret \\[redacted\\] is wrong"),
    (503, {"error": "temporarily_unavailable"}, KafkaProtocolError, "HTTP 503"),
    (200, b"not json", KafkaAuthenticationError, "not JSON"),
    (200, {"token_type": "bearer"}, KafkaAuthenticationError, "without an access_token"),
    (200, {"access_token": "opaque-token"}, KafkaAuthenticationError, "not a JWT"),
    (200, {"access_token": unsigned_jwt({"exp": time.time() + 60})}, KafkaAuthenticationError,
     "no 'sub' claim"),
    (200, {"access_token": unsigned_jwt({"sub": "w"})}, KafkaAuthenticationError, "'exp'"),
    (200, {"access_token": unsigned_jwt({"sub": "w", "exp": 1000})}, KafkaAuthenticationError,
     "already expired"),
])
def test_oidc_endpoint_failures_are_typed_and_never_show_the_secret(idp, status, doc, error, match):
    idp.answer = lambda n: (status, doc if not isinstance(doc, dict) else
                            {**doc, "echo": SECRET})
    with pytest.raises(error, match=match) as info:
        _oidc(idp.url).token()
    assert type(info.value) is error
    _no_secret(str(info.value), base64.b64encode(f"{CLIENT_ID}:{SECRET}".encode()).decode())
    if error is KafkaAuthenticationError and status != 200:
        assert "kafka.sasl.oauthbearer.client.secret" in str(info.value)


def test_oidc_endpoint_down_is_retriable():
    p = IdentityProvider()
    url = p.url
    p.close()
    with pytest.raises(KafkaProtocolError, match="cannot reach the OIDC token endpoint") as info:
        _oidc(url, timeout_s=2).token()
    assert type(info.value) is KafkaProtocolError


def test_oidc_redirect_is_not_followed(idp):
    idp.answer = lambda n: (302, b"")
    with pytest.raises(KafkaAuthenticationError, match="HTTP 302"):
        _oidc(idp.url).token()
    assert len(idp.requests) == 1


@pytest.fixture(scope="module")
def endpoint_cert(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("idp-tls"))


def test_oidc_over_https_verifies_the_endpoint_with_https_ca_location(endpoint_cert):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*endpoint_cert)
    p = IdentityProvider(tls=ctx)
    try:
        conf = {**_OIDC, "sasl.oauthbearer.token.endpoint.url": p.url}
        with pytest.raises(KafkaAuthenticationError, match="kafka.https.ca.location"):
            token_source_from_config(conf.get).token()  # the system store does not trust it
        good = token_source_from_config({**conf, "https.ca.location": str(endpoint_cert[0])}.get)
        assert good.token().principal == "writer"
        pem = endpoint_cert[0].read_text()
        assert token_source_from_config({**conf, "https.ca.pem": pem}.get).token()
    finally:
        p.close()


# ------------------------------------------------------------------------------ SASL exchange


class OAuthBearerBroker(FakeBroker):
    """The OAUTHBEARER side of a Kafka listener: a token whose claims name ``accept`` passes, any
    other gets Kafka's JSON error, then SASL_AUTHENTICATION_FAILED after the client's ^A."""

    def __init__(self, accept: str, session_ms: int = 0) -> None:
        super().__init__(sasl_password="unused")
        self.accept = accept
        self.session_ms = session_ms
        self.messages: list[bytes] = []

    def _sasl(self, payload: bytes, scram: dict[str, str]) -> tuple[bytes, bool]:
        self.messages.append(payload)
        w = Writer(True)
        if payload == b"\x01":
            out = (w.int16(58).string("Authentication failed during authentication due to "
                                      "invalid credentials with SASL mechanism OAUTHBEARER")
                   .bytes_(b"").int64(0).tags().build())
            return out, False
        token = payload.split(b"auth=Bearer ", 1)[1].split(b"\x01", 1)[0].decode()
        claims = decode_jwt_claims(token) or {}
        if claims.get("sub") == self.accept:
            return w.int16(0).string(None).bytes_(b"").int64(self.session_ms).tags().build(), True
        error = b'{"status":"invalid_token"}'
        return w.int16(0).string(None).bytes_(error).int64(0).tags().build(), False


def _unsecured(principal: str) -> SecurityConfig:
    return SecurityConfig.from_kafka_config({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": f"principal={principal} extension_traceId=S3cretExt"})


def _describe(conn: BrokerConnection) -> None:
    body = Writer(True).array(["t"], lambda w, s: w.string(s)).tags().build()
    conn.request(DESCRIBE_TRANSACTIONS, 0, body, flexible=True)


def test_oauthbearer_login_sends_the_token_and_extensions():
    broker = OAuthBearerBroker(accept="writer")
    try:
        conn = BrokerConnection("127.0.0.1", broker.port, _unsecured("writer"), timeout=5)
        _describe(conn)
        msg = broker.messages[0]
        assert msg.startswith(b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.")
        assert msg.endswith(b"\x01traceId=S3cretExt\x01\x01")
        assert [k for _, k, authed in broker.log if authed] == [DESCRIBE_TRANSACTIONS]
        conn.close()
    finally:
        broker.close()


def test_a_refused_token_acknowledges_and_is_a_typed_error_without_the_token():
    broker = OAuthBearerBroker(accept="somebody-else")
    try:
        sec = _unsecured("writer")
        conn = BrokerConnection("127.0.0.1", broker.port, sec, timeout=5)
        with pytest.raises(KafkaAuthenticationError) as info:
            _describe(conn)
        text = str(info.value)
        assert "principal 'writer'" in text and "invalid_token" in text
        assert "SASL_AUTHENTICATION_FAILED" in text and "kafka.sasl.oauthbearer.config" in text
        assert broker.messages[-1] == b"\x01"  # RFC 7628's answer to the server's error
        token = broker.messages[0].split(b"auth=Bearer ", 1)[1].split(b"\x01")[0].decode()
        _no_secret(text, token, "S3cretExt")
        assert not [k for _, k, authed in broker.log if authed]  # nothing reached the broker
    finally:
        broker.close()


def test_an_oidc_token_refused_by_the_broker_is_fetched_anew_on_the_next_login(idp):
    broker = OAuthBearerBroker(accept="writer")
    idp.sub = "nobody"
    try:
        sec = SecurityConfig.from_kafka_config({**_OIDC, "security.protocol": "SASL_PLAINTEXT",
                                                "sasl.oauthbearer.token.endpoint.url": idp.url})
        conn = BrokerConnection("127.0.0.1", broker.port, sec, timeout=5)
        with pytest.raises(KafkaAuthenticationError, match="kafka.sasl.oauthbearer.client.id"):
            _describe(conn)
        idp.sub = "writer"
        _describe(BrokerConnection("127.0.0.1", broker.port, sec, timeout=5))
        assert len(idp.requests) == 2
    finally:
        broker.close()


def test_a_login_whose_broker_session_is_ending_is_renewed_before_the_next_request(clock_ahead):
    """KIP-368: the broker closes a connection whose session expired at its next request; the
    client logs in again (a fresh token) before that."""
    broker = OAuthBearerBroker(accept="writer", session_ms=100_000)
    try:
        conn = BrokerConnection("127.0.0.1", broker.port, _unsecured("writer"), timeout=5)
        _describe(conn)
        clock_ahead(80)  # under the client's renewal point (85 % of the session)
        _describe(conn)
        assert len(broker.messages) == 1
        clock_ahead(10)
        _describe(conn)
        assert len(broker.messages) == 2
        assert sorted({n for n, key, _ in broker.log if key == SASL_AUTHENTICATE}) == [1, 2]
        conn.close()
    finally:
        broker.close()


def test_a_slow_token_fetch_is_not_spent_of_the_broker_session(clock_ahead, monkeypatch):
    """The broker starts a session once it has checked the token: a token endpoint that took
    most of the session's length to answer leaves the login its whole session (KIP-368). (The
    session counted from the TCP connect: such a login was renewed before the very next
    request, and a pipelining sender logged in again before each of its requests.)"""
    broker = OAuthBearerBroker(accept="writer", session_ms=10_000)
    try:
        fetch = UnsecuredJwtSource.token

        def slow_fetch(self: UnsecuredJwtSource, deadline: float | None = None) -> object:
            clock_ahead(9)  # past 85 % of the session to come
            return fetch(self, deadline)

        monkeypatch.setattr(UnsecuredJwtSource, "token", slow_fetch)
        conn = BrokerConnection("127.0.0.1", broker.port, _unsecured("writer"), timeout=60)
        _describe(conn)
        assert not conn.login_expiring
        _describe(conn)
        assert len(broker.messages) == 1
        clock_ahead(8.6)  # the session itself is now past its renewal point
        assert conn.login_expiring
        _describe(conn)
        assert len(broker.messages) == 2
        conn.close()
    finally:
        broker.close()
