"""Unit tests: Java's JKS and PKCS#12 stores as Spark users hold them, made by the JDK's keytool.

The stores come from the real keytool (Java 17 is a prerequisite of the project), so the reader is
checked against Java's own writer, not against an encoder of ours. The handshake test proves that
what comes out (CA PEM for trust, certificate chain and key for identity) authenticates both sides.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from tests.test_keystore import PASSWORD, _peer_subject_over_tls, pki  # noqa: F401 - fixture
from txkafka.connector.client import keystores as java_keystores
from txkafka.connector.client.connection import SecurityConfig
from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.client.config import check_client_config, kafka_client_config

STORE_PW, KEY_PW, TRUST_PW = "store-Pw-81c2", "key-Pw-93de", "trust-Pw-2b7f"


def _keytool(*args: str) -> None:
    exe = shutil.which("keytool")
    assert exe, "keytool (Java 17) is needed: the project's prerequisites include a JDK"
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def stores(pki):  # noqa: F811 - the fixture imported above
    d = pki["dir"]
    out = {"ks_jks": str(d / "client.jks"), "ts_jks": str(d / "trust.jks"),
           "ts_p12": str(d / "trust.p12"), "ks_p12": pki["keystore"], **pki}
    _keytool("-importkeystore", "-noprompt", "-srckeystore", pki["keystore"], "-srcstoretype",
             "PKCS12", "-srcstorepass", PASSWORD, "-destkeystore", out["ks_jks"],
             "-deststoretype", "JKS", "-deststorepass", STORE_PW, "-destkeypass", KEY_PW)
    for path, kind in ((out["ts_jks"], "JKS"), (out["ts_p12"], "PKCS12")):
        _keytool("-importcert", "-noprompt", "-alias", "caroot", "-file", pki["ca"],
                 "-keystore", path, "-storetype", kind, "-storepass", TRUST_PW)
    return out


def _ca_pem(pki_: dict) -> str:
    return open(pki_["ca"]).read()


def _same_cert(pem_a: str, pem_b: str) -> bool:
    from cryptography import x509

    return (x509.load_pem_x509_certificate(pem_a.encode())
            == x509.load_pem_x509_certificate(pem_b.encode()))


def test_jks_keystore_gives_keytools_key_and_chain(stores):
    ident = java_keystores.read_jks_keystore(stores["ks_jks"], STORE_PW, KEY_PW)
    key, cert, chain = pkcs12.load_key_and_certificates(open(stores["ks_p12"], "rb").read(),
                                                        PASSWORD.encode())
    got_key = serialization.load_pem_private_key(ident.key_pem.encode(), None)
    assert got_key.private_numbers() == key.private_numbers()
    first = ident.certificate_chain_pem.split("-----END CERTIFICATE-----")[0] + \
        "-----END CERTIFICATE-----\n"
    assert _same_cert(first, cert.public_bytes(serialization.Encoding.PEM).decode())
    assert ident.certificate_chain_pem.count("BEGIN CERTIFICATE") == 1 + len(chain)
    assert KEY_PW not in repr(ident) and "PRIVATE KEY" not in repr(ident)


def test_jks_passwords_are_checked_and_named(stores):
    with pytest.raises(KafkaConfigError, match="kafka.ssl.keystore.password is not the password"):
        java_keystores.read_jks_keystore(stores["ks_jks"], "wrong", KEY_PW)
    with pytest.raises(KafkaConfigError, match="kafka.ssl.key.password is not the password of the key"):
        java_keystores.read_jks_keystore(stores["ks_jks"], STORE_PW, "wrong")
    # Without ssl.key.password Java tries the store's password for the key: here it differs.
    with pytest.raises(KafkaConfigError, match="kafka.ssl.keystore.password is not the password of "
                                               "the key"):
        java_keystores.read_jks_keystore(stores["ks_jks"], STORE_PW, None)
    with pytest.raises(KafkaConfigError, match="needs kafka.ssl.keystore.password"):
        java_keystores.read_jks_keystore(stores["ks_jks"], None, KEY_PW)


@pytest.mark.parametrize("which", ["ts_jks", "ts_p12"])
def test_trust_stores_give_the_ca(stores, which):
    pem = java_keystores.read_truststore(stores[which], TRUST_PW)
    assert pem.count("BEGIN CERTIFICATE") == 1 and _same_cert(pem, _ca_pem(stores))
    with pytest.raises(KafkaConfigError,
                       match="kafka.ssl.truststore.password is not (the|its) password"):
        java_keystores.read_truststore(stores[which], "wrong")


def test_jks_trust_store_password_is_optional_as_in_java(stores):
    assert _same_cert(java_keystores.read_truststore(stores["ts_jks"], None), _ca_pem(stores))


def test_a_key_store_as_trust_store_trusts_its_own_certificate_as_java_does(stores):
    pem = java_keystores.read_truststore(stores["ks_jks"], STORE_PW)
    assert pem.count("BEGIN CERTIFICATE") == 1
    assert _same_cert(pem, open(stores["dir"] / "client.pem").read())


def test_an_empty_trust_store_is_refused(stores, tmp_path):
    empty = tmp_path / "empty.jks"
    # An empty JKS store: magic, version 2, no entries, the keyed digest of the header.
    import hashlib

    body = bytes.fromhex("feedfeed0000000200000000")
    empty.write_bytes(body + hashlib.sha1(TRUST_PW.encode("utf-16-be") + b"Mighty Aphrodite"
                                          + body).digest())
    with pytest.raises(KafkaConfigError, match="holds no certificate to trust"):
        java_keystores.read_truststore(str(empty), TRUST_PW)


def _java_style(stores: dict, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": "127.0.0.1:1", "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.location": stores["ts_jks"],
            "kafka.ssl.truststore.password": TRUST_PW,
            "kafka.ssl.keystore.location": stores["ks_jks"],
            "kafka.ssl.keystore.password": STORE_PW, "kafka.ssl.key.password": KEY_PW,
            **{f"kafka.{k}": v for k, v in extra.items()}}


def test_spark_style_jks_options_become_librdkafka_settings_that_authenticate(stores):
    conf = kafka_client_config(_java_style(stores, **{"ssl.keystore.type": "JKS",
                                                      "ssl.truststore.type": "JKS"}))
    assert set(conf) == {"bootstrap.servers", "security.protocol", "ssl.ca.pem",
                         "ssl.certificate.pem", "ssl.key.pem"}
    # librdkafka takes them (it parses inline PEM when the client is created)...
    check_client_config(conf, "producer")
    check_client_config({**conf, "group.id": "g"}, "consumer")
    # ...and so does the driver's commit client: the server sees the keystore's certificate and
    # the client trusts the server through the trust store's CA.
    seen = _peer_subject_over_tls(stores, SecurityConfig.from_kafka_config(conf).ssl_context())
    assert seen.get("subject", {}).get("commonName") == "writer", seen


def test_a_pkcs12_store_named_jks_is_left_to_librdkafka(stores):
    # keytool has written PKCS#12 by default since Java 9, whatever the file is called; Java reads
    # it under either type, and so does txkafka: the content decides.
    conf = kafka_client_config({"kafka.bootstrap.servers": "h:1",
                                "kafka.ssl.keystore.type": "JKS",
                                "kafka.ssl.keystore.location": stores["ks_p12"],
                                "kafka.ssl.keystore.password": PASSWORD})
    assert conf["ssl.keystore.location"] == stores["ks_p12"] and "ssl.key.pem" not in conf


def test_store_and_librdkafka_settings_for_the_same_thing_conflict(stores):
    with pytest.raises(KafkaConfigError, match="both give the CA certificates"):
        kafka_client_config(_java_style(stores, **{"ssl.ca.location": stores["ca"]}))
    with pytest.raises(KafkaConfigError, match="both give the client certificate"):
        kafka_client_config(_java_style(stores, **{"ssl.certificate.location": "/c.pem"}))


def test_a_pkcs12_keystore_and_a_pem_identity_conflict_for_every_client(stores):
    # librdkafka alone would use the keystore and ignore the PEM files without a word.
    with pytest.raises(KafkaConfigError, match="kafka.ssl.keystore.location and "
                                               "kafka.ssl.key.location both give the client"):
        kafka_client_config({"kafka.bootstrap.servers": "h:1",
                             "kafka.ssl.keystore.location": stores["ks_p12"],
                             "kafka.ssl.keystore.password": PASSWORD,
                             "kafka.ssl.key.location": "/k.pem"})


def test_errors_hold_no_password(stores):
    for bad in ({"ssl.keystore.password": "wrong-" + STORE_PW},
                {"ssl.truststore.password": "wrong-" + TRUST_PW}):
        with pytest.raises(KafkaConfigError) as info:
            kafka_client_config(_java_style(stores, **bad))
        text = str(info.value)
        assert STORE_PW not in text and TRUST_PW not in text and KEY_PW not in text
