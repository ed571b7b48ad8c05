import pytest

from txkafka.connector.client.connection import SecurityConfig, scram_client_final
from txkafka.connector.errors import KafkaAuthenticationError, KafkaConfigError


def test_scram_sha256_matches_rfc7677_example():
    first = "n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final, server_final = scram_client_final("SCRAM-SHA-256", "pencil", first, server_first)
    assert final == ("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert server_final == "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_rejects_a_server_nonce_that_does_not_extend_ours():
    with pytest.raises(KafkaAuthenticationError, match="nonce"):
        scram_client_final("SCRAM-SHA-512", "pw", "n=u,r=abc", "r=xyz,s=AAAA,i=4096")


def test_security_config_from_librdkafka_names():
    sec = SecurityConfig.from_kafka_config({
        "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice", "sasl.password": "s3cr3t!", "ssl.ca.location": "/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
    })
    assert sec.protocol == "SASL_SSL" and sec.uses_ssl and sec.uses_sasl
    assert sec.sasl_mechanism == "SCRAM-SHA-512"
    assert sec.check_hostname is False and sec.verify_certificate is True
    assert "s3cr3t!" not in repr(sec)


@pytest.mark.parametrize("conf, match", [
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "u",
      "sasl.password": "p"}, "supports PLAIN"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.username"),
])
def test_security_config_errors_name_the_option(conf, match):
    with pytest.raises(KafkaConfigError, match=match):
        SecurityConfig.from_kafka_config(conf)
