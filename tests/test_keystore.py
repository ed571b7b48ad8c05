"""Unit tests: the commit client's PKCS#12 keystore (kafka.ssl.keystore.location), no broker.

A local TLS server that requires a client certificate stands in for the SSL listener: the handshake
proves that the keystore's certificate (and its chain) is what the client presents. The same path
against Apache Kafka's SSL listener, with ACLs on the certificate's principal, is in
integration_tests/test_security_transport.py and test_security_pipeline.py.
"""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from txkafka.connector.client.connection import SecurityConfig
from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.client.transactions import TransactionClient

PASSWORD = "ks-Secret-4f1d2a"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "txkafka-tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer: str, issuer_key, *, ca: bool = False,
          server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]), critical=False)
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
    elif not ca:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("test-ca", ca_key, "test-ca", ca_key, ca=True)
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv = _cert("broker", srv_key, "test-ca", ca_key, server=True)
    cli_key = ec.generate_private_key(ec.SECP256R1())
    cli = _cert("writer", cli_key, "test-ca", ca_key)
    (d / "ca.pem").write_bytes(_pem(ca))
    (d / "server.pem").write_bytes(_pem(srv) + srv_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (d / "client.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", cli_key, cli, [ca], serialization.BestAvailableEncryption(PASSWORD.encode())))
    (d / "certs-only.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"ca", None, None, [ca], serialization.BestAvailableEncryption(PASSWORD.encode())))
    (d / "client.pem").write_bytes(_pem(cli))
    (d / "not-a-keystore.jks").write_bytes(b"\xfe\xed\xfe\xed" + os.urandom(64))
    return {"dir": d, "ca": str(d / "ca.pem"), "server": str(d / "server.pem"),
            "keystore": str(d / "client.p12")}


def _conf(pki: dict, **extra: str) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": pki["ca"],
            "ssl.keystore.location": pki["keystore"], "ssl.keystore.password": PASSWORD, **extra}


def _peer_subject_over_tls(pki: dict, client_ctx: ssl.SSLContext) -> dict:
    """Handshake with a server that requires a client certificate: the subject it saw
    (``subject``), or the server's error (``error``) and the client's (``client_error``)."""
    srv_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki["ca"])
    # A Java broker checks client certificates without Python 3.13's X509_STRICT; the test PKI's
    # certificates have no Authority Key Identifier, as many real ones do.
    srv_ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    srv_ctx.load_cert_chain(pki["server"])
    srv_ctx.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    seen: dict = {}

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with srv_ctx.wrap_socket(conn, server_side=True) as tls:
                seen["subject"] = dict(x[0] for x in tls.getpeercert()["subject"])
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as e:
            seen["error"] = e
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    port = listener.getsockname()[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                seen["reply"] = tls.recv(2)
    except (ssl.SSLError, OSError) as e:
        seen["client_error"] = e
    t.join(10)
    listener.close()
    return seen


@pytest.fixture
def removed_files(monkeypatch, tmp_path):
    """The temporary files the code under test wrote and removed: {path: content}."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    removed: dict[str, bytes] = {}
    real_unlink = os.unlink

    def unlink(path, *a, **kw):
        removed[str(path)] = Path(path).read_bytes()
        real_unlink(path, *a, **kw)

    monkeypatch.setattr(os, "unlink", unlink)
    yield removed
    assert list(tmp_path.iterdir()) == [], "a temporary file was left behind"


def _only_key_file(removed: dict) -> bytes:
    keys = [b for b in removed.values() if b"PRIVATE KEY" in b]
    assert len(keys) == 1, list(removed)
    return keys[0]


def test_certificates_are_verified_as_librdkafka_verifies_them(pki):
    # The test PKI's CA-signed certificates carry no Authority Key Identifier. librdkafka accepts
    # them; Python 3.13's default X509_STRICT would not, and the driver's commit client would
    # then refuse brokers the tasks write to. (The handshakes here fail without the fix on 3.13.)
    ctx = SecurityConfig.from_kafka_config(_conf(pki)).ssl_context()
    assert not ctx.verify_flags & ssl.VERIFY_X509_STRICT
    assert _peer_subject_over_tls(pki, ctx).get("reply") == b"ok"


def test_the_keystore_certificate_is_presented_in_the_handshake(pki):
    ctx = SecurityConfig.from_kafka_config(_conf(pki)).ssl_context()
    seen = _peer_subject_over_tls(pki, ctx)
    assert seen.get("subject", {}).get("commonName") == "writer", seen
    assert seen.get("reply") == b"ok", seen


def test_without_a_client_certificate_the_server_refuses(pki):
    # The control: the same server refuses a client without the keystore, so the test above
    # proves the keystore's certificate did the work.
    ctx = SecurityConfig.from_kafka_config({"security.protocol": "SSL",
                                            "ssl.ca.location": pki["ca"]}).ssl_context()
    seen = _peer_subject_over_tls(pki, ctx)
    assert "subject" not in seen, seen
    assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in str(seen.get("error")), seen


def test_no_key_file_is_left_behind_and_the_key_never_touches_disk_in_clear(pki, removed_files):
    SecurityConfig.from_kafka_config(_conf(pki)).ssl_context()
    assert len(removed_files) == 2
    assert all(os.path.basename(p).startswith("txkafka-") for p in removed_files)
    assert b"ENCRYPTED PRIVATE KEY" in _only_key_file(removed_files)


@pytest.mark.parametrize("case, overrides, needle", [
    ("wrong password", {"ssl.keystore.password": "not-the-password"},
     "kafka.ssl.keystore.password is not its password"),
    ("not PKCS#12", {"ssl.keystore.location": "not-a-keystore.jks"}, "keytool -importkeystore"),
    ("missing file", {"ssl.keystore.location": "nope.p12"}, "could not read kafka.ssl.keystore.location"),
    ("no key", {"ssl.keystore.location": "certs-only.p12"}, "holds no private key"),
])
def test_keystore_problems_are_config_errors_naming_the_option(pki, case, overrides, needle):
    conf = _conf(pki, **{k: (str(pki["dir"] / v) if k.endswith("location") else v)
                         for k, v in overrides.items()})
    with pytest.raises(KafkaConfigError) as info:
        SecurityConfig.from_kafka_config(conf).ssl_context()
    assert needle in str(info.value)
    assert PASSWORD not in str(info.value) and "not-the-password" not in str(info.value)


def test_keystore_and_pem_certificate_together_are_refused(pki):
    with pytest.raises(KafkaConfigError, match="kafka.ssl.certificate.location.*set one"):
        SecurityConfig.from_kafka_config(_conf(pki, **{
            "ssl.certificate.location": str(pki["dir"] / "client.pem")}))


def test_keystore_needs_its_password(pki):
    conf = _conf(pki)
    del conf["ssl.keystore.password"]
    with pytest.raises(KafkaConfigError, match="needs kafka.ssl.keystore.password"):
        SecurityConfig.from_kafka_config(conf)


def test_the_keystore_password_stays_out_of_reprs(pki):
    sec = SecurityConfig.from_kafka_config(_conf(pki))
    assert PASSWORD not in repr(sec)
    assert PASSWORD not in repr(TransactionClient({"bootstrap.servers": "127.0.0.1:1",
                                                   **_conf(pki)}))


def test_an_inline_clear_key_never_touches_disk_in_clear(pki, removed_files):
    # kafka.ssl.key.pem without a password (also what a JKS keystore becomes): the temporary
    # file Python's ssl needs holds the key encrypted, and the handshake still presents it.
    from cryptography.hazmat.primitives.serialization import pkcs12 as p12

    key, cert, _ = p12.load_key_and_certificates(open(pki["keystore"], "rb").read(),
                                                 PASSWORD.encode())
    conf = {"security.protocol": "SSL", "ssl.ca.location": pki["ca"],
            "ssl.certificate.pem": cert.public_bytes(serialization.Encoding.PEM).decode(),
            "ssl.key.pem": key.private_bytes(serialization.Encoding.PEM,
                                             serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()).decode()}
    ctx = SecurityConfig.from_kafka_config(conf).ssl_context()
    assert b"ENCRYPTED PRIVATE KEY" in _only_key_file(removed_files)
    seen = _peer_subject_over_tls(pki, ctx)
    assert seen.get("subject", {}).get("commonName") == "writer", seen
