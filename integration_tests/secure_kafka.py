"""A secured Apache Kafka for tests: TLS, SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) and the
StandardAuthorizer.

Everything is made at test time: a CA, a broker certificate (SAN 127.0.0.1 and localhost), one client
certificate per principal (its key encrypted with a password), a second CA that signed nothing the
broker trusts (for wrong-CA tests), random passwords, SCRAM credentials (StorageTool
``format --add-scram``) and listener-scoped JAAS configs. The cluster is a single-node
:class:`~txkafka.embedded_kafka.EmbeddedKafka` with three extra listeners:

==============  ==============  ========================================================
listener        protocol        principal
==============  ==============  ========================================================
PLAINTEXT       PLAINTEXT       User:ANONYMOUS (inter-broker and controller side; super user)
SSL             SSL             from the client certificate: CN=writer -> User:writer
SASL_PLAINTEXT  SASL_PLAINTEXT  the SASL user (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), or the
                                OAUTHBEARER token's ``sub`` claim (OAUTHBEARER)
SASL_SSL        SASL_SSL        the SASL user (same mechanisms), TLS without client certs
==============  ==============  ========================================================

OAUTHBEARER uses Kafka's default server callback, the unsecured validator: it accepts unsigned JWTs
(``{"alg":"none"}``) with ``sub`` and ``exp`` claims and makes ``sub`` the principal.
:class:`TokenEndpoint` is a local OAuth 2 token endpoint (client credentials grant) that issues
such tokens with ``sub`` = the client id, for the users' passwords as client secrets.

``allow.everyone.if.no.acl.found=false``: a principal can do only what an ACL grants. ``admin`` is a
super user; ``reader``, ``writer`` and ``stranger`` start with no ACLs at all, and tests grant what
they need with :meth:`SecureKafka.grant_reader` / :meth:`SecureKafka.grant_writer`.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from integration_tests.kafka_helpers import QUIET, KafkaTarget
from tests.http_stub import serve_json_posts
from txkafka.embedded_kafka import EmbeddedKafka, EmbeddedKafkaError, Progress, _stderr_progress

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
LISTENERS = {"SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}
SUPER_USER = "admin"
DEFAULT_USERS = ("admin", "reader", "writer", "stranger")

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTHBEARER_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# Client subject /O=txkafka-tests/CN=writer reads "CN=writer,O=txkafka-tests" in RFC 2253 order (the
# broker logs it so) -> User:writer: the SSL principal is the same user name as the SASL one, so one
# set of ACLs covers every listener.
_PRINCIPAL_RULES = r"RULE:^CN=([A-Za-z0-9._-]+),O=txkafka-tests$/$1/,DEFAULT"


class PkiError(RuntimeError):
    """openssl could not make the test certificates; the message has its output."""


# ----------------------------------------------------------------------------------------- PKI


@dataclass(frozen=True)
class ClientCert:
    cert: Path
    key: Path  # PKCS#8, encrypted with Pki.key_password
    keystore: Path  # PKCS#12: the key, the certificate and the CA; password Pki.keystore_password
    jks: Path       # the same as a JKS keystore (keytool); store password Pki.keystore_password,
    #                 key password Pki.key_password (they differ, as Java allows)


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: Path               # PEM of the CA that signed the broker and client certificates
    other_ca: Path         # PEM of an unrelated CA: the broker's certificate does not chain to it
    broker_keystore: Path  # PKCS#8 key + certificate chain (Kafka's PEM keystore file format)
    clients: dict[str, ClientCert]
    key_password: str
    keystore_password: str
    truststore_jks: Path   # the CA as a JKS trust store (keytool), password Pki.keystore_password
    crl_clean: Path        # the CA's certificate revocation list, revoking nothing
    crl_broker_revoked: Path  # ... revoking the broker's certificate


def _openssl(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")


# Passwords reach openssl through the environment of its process, never its command line.
_PW_ENV = "TXKAFKA_TEST_KEY_PASSWORD"


def _ec_key(path: Path, cwd: Path, password: str | None = None) -> None:
    """A P-256 key, PKCS#8 PEM (what Kafka's PEM keystore reads); encrypted given a password."""
    args = ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)]
    if password:
        args += ["-aes-256-cbc", "-pass", f"env:{_PW_ENV}"]
    _openssl(args, cwd, {_PW_ENV: password} if password else None)


def _self_signed_ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _ec_key(key, directory)
    _openssl([
        "req", "-x509", "-new", "-key", str(key), "-out", str(cert), "-days", "3",
        "-subj", f"/CN={name}/O=txkafka-tests", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    ], directory)
    return key, cert


def _signed_cert(directory: Path, ca_key: Path, ca_cert: Path, name: str, subject: str,
                 extensions: str, key_password: str | None) -> tuple[Path, Path]:
    key, csr, cert, ext = (directory / f"{name}.key", directory / f"{name}.csr",
                           directory / f"{name}.pem", directory / f"{name}.ext")
    _ec_key(key, directory, key_password)
    req = ["req", "-new", "-key", str(key), "-out", str(csr), "-subj", subject]
    if key_password:
        req += ["-passin", f"env:{_PW_ENV}"]
    _openssl(req, directory, {_PW_ENV: key_password} if key_password else None)
    ext.write_text(extensions)
    _openssl([
        "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
        "-set_serial", str(secrets.randbits(63)), "-days", "3", "-extfile", str(ext),
        "-out", str(cert),
    ], directory)
    csr.unlink()
    ext.unlink()
    return key, cert


def _pkcs12(directory: Path, key: Path, cert: Path, ca: Path, out: Path, key_password: str,
            keystore_password: str) -> None:
    """A client keystore as Java's keytool and librdkafka read it (AES, PBKDF2)."""
    _openssl(["pkcs12", "-export", "-inkey", str(key), "-in", str(cert), "-certfile", str(ca),
              "-name", "client", "-out", str(out), "-passin", f"env:{_PW_ENV}",
              "-passout", f"env:{_PW_ENV}_OUT"],
             directory, {_PW_ENV: key_password, f"{_PW_ENV}_OUT": keystore_password})


def _keytool(args: list[str], cwd: Path) -> None:
    exe = shutil.which("keytool")
    if exe is None:
        raise PkiError("keytool (part of the JDK the broker runs on) is needed for JKS test stores")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise PkiError(f"keytool {args[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")


def make_pki(directory: Path, users: Iterable[str], key_password: str,
             keystore_password: str) -> Pki:
    """A CA, a broker certificate for 127.0.0.1/localhost, and one client certificate per user."""
    if shutil.which("openssl") is None:
        raise PkiError("the openssl command is needed to make test certificates "
                       "(apt-get install openssl)")
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca = _self_signed_ca(directory, "txkafka-test-ca")
    other_key, other_ca = _self_signed_ca(directory, "txkafka-unrelated-ca")
    other_key.unlink()
    b_key, b_cert = _signed_cert(
        directory, ca_key, ca, "broker", "/CN=localhost/O=txkafka-tests",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
        None,
    )
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(b_key.read_text() + b_cert.read_text() + ca.read_text())
    clients = {}
    for user in users:
        key, cert = _signed_cert(
            directory, ca_key, ca, f"client-{user}", f"/O=txkafka-tests/CN={user}",
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=clientAuth\n",
            key_password,
        )
        p12 = directory / f"client-{user}.p12"
        _pkcs12(directory, key, cert, ca, p12, key_password, keystore_password)
        jks = directory / f"client-{user}.jks"
        # Passwords on keytool's command line: test-only values, in a test-only process.
        _keytool(["-importkeystore", "-noprompt", "-srckeystore", str(p12), "-srcstoretype",
                  "PKCS12", "-srcstorepass", keystore_password, "-destkeystore", str(jks),
                  "-deststoretype", "JKS", "-deststorepass", keystore_password,
                  "-destkeypass", key_password], directory)
        clients[user] = ClientCert(cert, key, p12, jks)
    truststore_jks = directory / "truststore.jks"
    _keytool(["-importcert", "-noprompt", "-alias", "caroot", "-file", str(ca), "-keystore",
              str(truststore_jks), "-storetype", "JKS", "-storepass", keystore_password], directory)
    crl_clean = _crl(ca_key, ca, [], directory / "crl-clean.pem")
    crl_revoked = _crl(ca_key, ca, [b_cert], directory / "crl-broker-revoked.pem")
    ca_key.unlink()  # nothing else gets signed
    for p in directory.iterdir():
        p.chmod(0o600)
    return Pki(directory, ca, other_ca, keystore, clients, key_password, keystore_password,
               truststore_jks, crl_clean, crl_revoked)


def _crl(ca_key: Path, ca_cert: Path, revoked: list[Path], out: Path) -> Path:
    """A CRL signed by the CA (PEM), revoking the certificates in ``revoked``."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    now = dt.datetime.now(dt.timezone.utc)
    builder = (x509.CertificateRevocationListBuilder().issuer_name(ca.subject)
               .last_update(now - dt.timedelta(minutes=5)).next_update(now + dt.timedelta(days=3)))
    for path in revoked:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(cert.serial_number)
            .revocation_date(now - dt.timedelta(minutes=1)).build())
    out.write_bytes(builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    return out


# ------------------------------------------------------------------------------------ cluster


def _password(user: str) -> str:
    # Letters and digits only: the value goes into JAAS strings and StorageTool's --add-scram syntax.
    return f"{user}Pw{secrets.token_hex(12)}"


class SecureKafka:
    """A single-node secured cluster plus client configs per principal, listener and mechanism."""

    def __init__(self, root: Path | str, *, users: Iterable[str] = DEFAULT_USERS,
                 progress: Progress = _stderr_progress) -> None:
        self.root = Path(root)
        self.users = tuple(users)
        self.passwords = {u: _password(u) for u in self.users}
        self.key_password = f"keyPw{secrets.token_hex(12)}"
        self.keystore_password = f"ksPw{secrets.token_hex(12)}"
        self.progress = progress
        self.pki: Pki | None = None
        self.cluster: EmbeddedKafka | None = None
        self._token_endpoint: TokenEndpoint | None = None

    def __repr__(self) -> str:
        state = self.cluster.bootstrap_servers if self.cluster else "not started"
        return f"SecureKafka({self.root}, {state})"

    # ----------------------------------------------------------------- start/stop

    def start(self, timeout: float = 240.0) -> "SecureKafka":
        self.pki = make_pki(self.root / "pki", self.users, self.key_password,
                            self.keystore_password)
        self.cluster = EmbeddedKafka(
            "secure", 1, root=self.root / "cluster", listeners=dict(LISTENERS),
            extra_config=self._server_config(), format_args=self._scram_format_args(),
            progress=self.progress,
        )
        self.cluster.start(timeout=timeout)
        return self

    def destroy(self) -> None:
        if self._token_endpoint is not None:
            self._token_endpoint.close()
        if self.cluster is not None:
            self.cluster.destroy()

    @property
    def token_endpoint(self) -> "TokenEndpoint":
        """The identity provider of the OIDC tests (started on first use)."""
        if self._token_endpoint is None:
            self._token_endpoint = TokenEndpoint(self.passwords)
        return self._token_endpoint

    def _scram_format_args(self) -> list[str]:
        args: list[str] = []
        for user, pw in self.passwords.items():
            for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                args += ["--add-scram", f"{mech}=[name={user},password={pw}]"]
        return args

    def _server_config(self) -> dict[str, str]:
        assert self.pki is not None
        plain_users = " ".join(f'user_{u}="{pw}"' for u, pw in self.passwords.items())
        conf = {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # ANONYMOUS is the principal of the PLAINTEXT and CONTROLLER listeners, which the cluster
            # itself uses (broker -> controller, readiness check): a test-only shortcut.
            "super.users": f"User:{SUPER_USER};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.pki.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.pki.ca),
            "ssl.principal.mapping.rules": _PRINCIPAL_RULES,
            "listener.name.ssl.ssl.client.auth": "required",
        }
        for listener in ("sasl_plaintext", "sasl_ssl"):
            conf[f"listener.name.{listener}.sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
            conf[f"listener.name.{listener}.plain.sasl.jaas.config"] = (
                f"{_PLAIN_MODULE} required {plain_users};"
            )
            for mech in ("scram-sha-256", "scram-sha-512"):
                key = f"listener.name.{listener}.{mech}.sasl.jaas.config"
                conf[key] = f"{_SCRAM_MODULE} required;"
            # No callback handler configured: the broker validates with Kafka's default, the
            # unsecured JWS validator (sub -> principal). The login side needs a subject to start.
            conf[f"listener.name.{listener}.oauthbearer.sasl.jaas.config"] = (
                f'{_OAUTHBEARER_MODULE} required unsecuredLoginStringClaim_sub="{SUPER_USER}";'
            )
        return conf

    # ----------------------------------------------------------------- client side

    def bootstrap(self, listener: str) -> str:
        assert self.cluster is not None, "start() first"
        if listener.upper() == "PLAINTEXT":
            return self.cluster.bootstrap_servers
        return self.cluster.listener_bootstrap(listener.upper())

    def client_config(self, user: str, protocol: str, mechanism: str | None = None, *,
                      password: str | None = None, ca: Path | str | None = None,
                      client_cert: bool | None = None, keystore: str | None = None,
                      java_truststore: bool = False, oidc: bool = False) -> dict[str, str]:
        """librdkafka settings (as ``kafka.*`` options would give them, prefix stripped).

        ``protocol`` is the listener/security protocol; ``mechanism`` is needed for SASL.
        ``password`` and ``ca`` override the right ones (for failure tests); ``client_cert`` adds
        the user's certificate and encrypted key (default: only on the SSL listener, where it is the
        identity). ``keystore`` ("pkcs12" or "jks") gives the certificate as the user's keystore
        instead of PEM files; ``java_truststore`` names the CA and the keystore's type with Java's
        keys as a query moved over from Spark's ``kafka`` format would: with a JKS keystore a JKS
        trust store, else ``ssl.truststore.type=PEM`` (Spark options only: txkafka translates
        them; librdkafka reads no JKS).

        ``mechanism="OAUTHBEARER"``: librdkafka's unsecured JWT with ``principal=<user>``; with
        ``oidc=True`` the client credentials of :attr:`token_endpoint` instead (client id = the
        user, client secret = the user's password or ``password``).
        """
        assert self.pki is not None, "start() first"
        protocol = protocol.upper()
        conf = {"bootstrap.servers": self.bootstrap(protocol), "security.protocol": protocol}
        if protocol.startswith("SASL"):
            if mechanism is None:
                raise ValueError(f"{protocol} needs a SASL mechanism")
            if mechanism.upper() == "OAUTHBEARER" and oidc:
                conf.update({
                    "sasl.mechanism": "OAUTHBEARER",
                    "sasl.oauthbearer.method": "oidc",
                    "sasl.oauthbearer.client.id": user,
                    "sasl.oauthbearer.client.secret":
                        self.passwords[user] if password is None else password,
                    "sasl.oauthbearer.token.endpoint.url": self.token_endpoint.url,
                    "sasl.oauthbearer.scope": "kafka",
                })
            elif mechanism.upper() == "OAUTHBEARER":
                conf.update({
                    "sasl.mechanism": "OAUTHBEARER",
                    "enable.sasl.oauthbearer.unsecure.jwt": "true",
                    "sasl.oauthbearer.config": f"principal={user} scope=kafka lifeSeconds=3600",
                })
            else:
                conf.update({
                    "sasl.mechanism": mechanism,
                    "sasl.username": user,
                    "sasl.password": self.passwords[user] if password is None else password,
                })
        if protocol in ("SSL", "SASL_SSL"):
            if java_truststore and keystore == "jks":
                conf.update({"ssl.truststore.type": "JKS",
                             "ssl.truststore.location": str(self.pki.truststore_jks),
                             "ssl.truststore.password": self.pki.keystore_password})
            elif java_truststore:
                conf.update({"ssl.truststore.type": "PEM",
                             "ssl.truststore.location": str(ca or self.pki.ca)})
            else:
                conf["ssl.ca.location"] = str(ca or self.pki.ca)
            conf["ssl.endpoint.identification.algorithm"] = "https"
            if client_cert if client_cert is not None else protocol == "SSL":
                cc = self.pki.clients[user]
                if keystore == "jks":
                    conf.update({"ssl.keystore.location": str(cc.jks),
                                 "ssl.keystore.password": self.pki.keystore_password,
                                 "ssl.key.password": self.pki.key_password})
                    if java_truststore:
                        conf["ssl.keystore.type"] = "JKS"
                    return conf
                if keystore == "pkcs12":
                    conf.update({"ssl.keystore.location": str(cc.keystore),
                                 "ssl.keystore.password": self.pki.keystore_password})
                    if java_truststore:
                        conf["ssl.keystore.type"] = "PKCS12"
                    return conf
                assert keystore is None, keystore
                conf.update({
                    "ssl.certificate.location": str(cc.cert),
                    "ssl.key.location": str(cc.key),
                    "ssl.key.password": self.pki.key_password,
                })
        return conf

    def kafka_options(self, user: str, protocol: str, mechanism: str | None = None,
                      **kw) -> dict[str, str]:
        """The same settings as Spark options (``kafka.`` prefix), for reader/writer tests."""
        return {f"kafka.{k}": v for k, v in self.client_config(user, protocol, mechanism,
                                                                 **kw).items()}

    def target(self, user: str, protocol: str, mechanism: str | None = None, **kw) -> KafkaTarget:
        """A :class:`KafkaTarget` (test helpers) acting as ``user`` over ``protocol``."""
        conf = self.client_config(user, protocol, mechanism, **kw)
        bootstrap = conf.pop("bootstrap.servers")
        return KafkaTarget(bootstrap, f"secure:{user}@{protocol}", self.cluster, extra_conf=conf)

    @property
    def admin_target(self) -> KafkaTarget:
        """The super user over SASL_SSL/SCRAM-SHA-512 (topics, ACLs)."""
        return self.target(SUPER_USER, "SASL_SSL", "SCRAM-SHA-512")

    def secret_values(self) -> list[str]:
        """Every secret a client of this cluster might hold: for hygiene greps."""
        return [*self.passwords.values(), self.key_password, self.keystore_password]

    # ----------------------------------------------------------------------- ACLs

    def _admin(self) -> AdminClient:
        return AdminClient({**self.admin_target.conf, "logger": QUIET})

    def create_acls(self, bindings: list[AclBinding], timeout: float = 30.0) -> None:
        """Create ACLs and wait until the broker's authorizer answers with them (bounded)."""
        admin = self._admin()
        for f in admin.create_acls(bindings, request_timeout=timeout).values():
            f.result(timeout=timeout)
        # KRaft: the controller commits the ACL records; the broker's authorizer applies them from
        # the metadata log. DescribeAcls is answered from that same authorizer cache.
        deadline = time.monotonic() + timeout
        want = {_binding_key(b) for b in bindings}
        while True:
            got = admin.describe_acls(_ANY_ACL, request_timeout=timeout).result(timeout=timeout)
            missing = want - {_binding_key(b) for b in got}
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"ACLs not visible after {timeout:.0f}s: {sorted(missing)[:3]}")
            time.sleep(0.1)

    def delete_acls(self, bindings: list[AclBinding], timeout: float = 30.0) -> None:
        admin = self._admin()
        filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                                    b.operation, b.permission_type) for b in bindings]
        for f in admin.delete_acls(filters, request_timeout=timeout).values():
            f.result(timeout=timeout)

    def grant_reader(self, user: str, topic: str, group_prefix: str | None = None, *,
                     read: bool = True) -> list[AclBinding]:
        """Topic READ + DESCRIBE (``read=False``: DESCRIBE only), group READ on a prefix."""
        ops = [AclOperation.DESCRIBE] + ([AclOperation.READ] if read else [])
        bindings = [allow(user, ResourceType.TOPIC, topic, op) for op in ops]
        if group_prefix is not None:
            bindings.append(allow(user, ResourceType.GROUP, group_prefix, AclOperation.READ,
                                  ResourcePatternType.PREFIXED))
        self.create_acls(bindings)
        return bindings

    def grant_writer(self, user: str, topic: str, transactional_id_prefix: str | None, *,
                     topic_write: bool = True) -> list[AclBinding]:
        """Topic WRITE + DESCRIBE, TransactionalId WRITE + DESCRIBE on a PREFIXED pattern.

        Nothing on the cluster: Kafka >= 3.0 (KIP-679) needs no IDEMPOTENT_WRITE for a
        transactional producer (WRITE on its transactional id is what InitProducerId checks).
        """
        ops = [AclOperation.DESCRIBE] + ([AclOperation.WRITE] if topic_write else [])
        bindings = [allow(user, ResourceType.TOPIC, topic, op) for op in ops]
        if transactional_id_prefix is not None:
            bindings += [
                allow(user, ResourceType.TRANSACTIONAL_ID, transactional_id_prefix, op,
                      ResourcePatternType.PREFIXED)
                for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
            ]
        self.create_acls(bindings)
        return bindings

    def grant_describe_configs(self, user: str) -> list[AclBinding]:
        """DescribeConfigs on the cluster: what lets the exactly-once sink read each broker's
        transaction partition verification at start (or it needs its acknowledgement option)."""
        bindings = [allow(user, ResourceType.BROKER, "kafka-cluster",
                          AclOperation.DESCRIBE_CONFIGS)]
        self.create_acls(bindings)
        return bindings


class TokenEndpoint:
    """A local OAuth 2 token endpoint (RFC 6749 client credentials, HTTP basic authentication).

    A known client id with its secret gets an unsigned JWT (``{"alg":"none"}``, what the brokers'
    unsecured validator accepts) with ``sub`` = the client id; a wrong secret gets 401
    ``invalid_client``. ``forged`` client ids get a token signed with a made-up HS256 key, which
    the brokers refuse. ``requests`` counts the tokens asked for, per client id.
    """

    def __init__(self, secrets_by_client: dict[str, str], lifetime_s: float = 3600.0) -> None:
        self.secrets_by_client = dict(secrets_by_client)
        self.lifetime_s = lifetime_s
        self.forged: set[str] = set()
        self.requests: dict[str, int] = {}
        self.issued: list[str] = []  # every token handed out (for the no-secret greps)
        self._server = serve_json_posts(
            lambda path, headers, form: self._answer(headers.get("Authorization") or "", form))
        self.url = f"http://127.0.0.1:{self._server.server_port}/oauth2/token"

    def _answer(self, authorization: str, form: dict[str, list[str]]) -> tuple[int, dict]:
        if form.get("grant_type") != ["client_credentials"]:
            return 400, {"error": "unsupported_grant_type"}
        try:
            client, _, secret = base64.b64decode(
                authorization.removeprefix("Basic ")).decode().partition(":")
        except ValueError:
            return 401, {"error": "invalid_client", "error_description": "no basic credentials"}
        if self.secrets_by_client.get(client) != secret:
            return 401, {"error": "invalid_client",
                         "error_description": "Client authentication failed"}
        self.requests[client] = self.requests.get(client, 0) + 1
        now = time.time()
        claims = {"sub": client, "iat": now, "exp": now + self.lifetime_s,
                  "scope": (form.get("scope") or [""])[0]}
        alg = "HS256" if client in self.forged else "none"
        token = ".".join([_b64url({"alg": alg, "typ": "JWT"}), _b64url(claims),
                          _b64url("made-up-signature") if alg != "none" else ""])
        self.issued.append(token)
        return 200, {"access_token": token, "token_type": "Bearer",
                     "expires_in": int(self.lifetime_s)}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _b64url(value: object) -> str:
    raw = value.encode() if isinstance(value, str) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def allow(user: str, restype: ResourceType, name: str, op: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(restype, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)


_ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)


def _binding_key(b: AclBinding) -> tuple:
    return (b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host,
            b.operation.name, b.permission_type.name)


def start_secure_kafka(root: Path | str, timeout: float = 240.0, **kw) -> SecureKafka:
    """Start a :class:`SecureKafka`; on failure destroy it and raise with the broker's log tail."""
    sk = SecureKafka(root, **kw)
    try:
        return sk.start(timeout)
    except (EmbeddedKafkaError, PkiError):
        sk.destroy()
        raise
