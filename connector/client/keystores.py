"""Java key and trust stores (JKS, PKCS#12) read into the PEM that librdkafka and Python's ssl take.

Why: a query moved over from Spark's ``format("kafka")`` names its TLS material the Java way
(``ssl.truststore.location=truststore.jks``, ``ssl.keystore.location=keystore.jks`` with their
passwords). librdkafka reads CA certificates as PEM only and keystores as PKCS#12 only, so without
this every such query would need its stores converted by hand first.

Facts used (Sun's JKS layout, as keytool writes it): big-endian; magic ``FEEDFEED``, version 1 or 2,
an entry count; each entry a tag (1 private key, 2 trusted certificate), a modified-UTF-8 alias and
a millisecond timestamp; a private key entry holds an ``EncryptedPrivateKeyInfo`` (DER) under Sun's
key protector (OID 1.3.6.1.4.1.42.2.17.1.1) and its certificate chain; version 2 names each
certificate's type. The file ends with SHA-1(password as UTF-16BE + "Mighty Aphrodite" + the
preceding bytes). The key protector is a SHA-1 keystream: salt (20 bytes), the XORed key, then
SHA-1(password + plain key) as a check.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import textwrap
from dataclasses import dataclass, field

from ..errors import KafkaConfigError

_JKS_MAGIC = 0xFEEDFEED
_JCEKS_MAGIC = 0xCECECECE
_SUN_KEY_PROTECTOR = bytes.fromhex("060a2b060104012a021101 01".replace(" ", ""))  # DER OID


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate chain and its key, both PEM; the key unencrypted (memory only)."""

    certificate_chain_pem: str
    key_pem: str = field(repr=False)


def is_jks(data: bytes) -> bool:
    return len(data) >= 4 and struct.unpack(">I", data[:4])[0] == _JKS_MAGIC


def is_jks_file(path: str) -> bool:
    """Whether the file is a JKS store; an unreadable one is left to librdkafka's own error."""
    try:
        with open(path, "rb") as fh:
            return is_jks(fh.read(4))
    except OSError:
        return False


def _read_file(option: str, path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as e:
        raise KafkaConfigError(f"could not read {option}={path!r}: {e.strerror or e}") from None


def _pem(label: str, der: bytes) -> str:
    body = "\n".join(textwrap.wrap(base64.b64encode(der).decode("ascii"), 64))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n"


def _pem_cert(der: bytes) -> str:
    return _pem("CERTIFICATE", der)


class _Cursor:
    def __init__(self, data: bytes, option: str, path: str) -> None:
        self.data, self.pos, self.option, self.path = data, 0, option, path

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise KafkaConfigError(f"{self.option}={self.path!r} is not a readable JKS store "
                                   "(truncated or corrupt)")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u2(self) -> int:
        return struct.unpack(">H", self.take(2))[0]

    def u4(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def utf(self) -> str:
        return self.take(self.u2()).decode("utf-8", errors="replace")


@dataclass
class _JksEntries:
    trusted: list[bytes]                                  # DER certificates
    keys: list[tuple[str, bytes, list[bytes]]]            # alias, protected key, DER chain


def _parse_jks(data: bytes, password: str | None, option: str, path: str,
               password_option: str) -> _JksEntries:
    c = _Cursor(data, option, path)
    magic, version, count = c.u4(), c.u4(), c.u4()
    if magic != _JKS_MAGIC or version not in (1, 2):
        raise KafkaConfigError(f"{option}={path!r} is not a JKS store")
    entries = _JksEntries([], [])
    for _ in range(count):
        tag = c.u4()
        alias = c.utf()
        c.take(8)  # timestamp
        if tag == 1:
            protected = c.take(c.u4())
            chain = []
            for _ in range(c.u4()):
                if version == 2:
                    c.utf()  # certificate type, "X.509"
                chain.append(c.take(c.u4()))
            entries.keys.append((alias, protected, chain))
        elif tag == 2:
            if version == 2:
                c.utf()
            entries.trusted.append(c.take(c.u4()))
        else:
            raise KafkaConfigError(f"{option}={path!r} holds a JKS entry of unknown kind {tag} "
                                   "(a JCEKS secret key?)")
    body_end = c.pos
    digest = c.take(20)
    if password is not None:
        want = hashlib.sha1(password.encode("utf-16-be") + b"Mighty Aphrodite"
                            + data[:body_end]).digest()
        if not hmac.compare_digest(want, digest):
            raise KafkaConfigError(
                f"{password_option} is not the password of {option}={path!r} (the store's "
                "integrity check failed)")
    return entries


def _der_item(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER item at ``pos``."""
    tag = data[pos]
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(data[pos:pos + n], "big")
        pos += n
    return tag, pos, pos + length


def _unprotect_jks_key(protected: bytes, password: str, option: str, path: str,
                       password_option: str) -> bytes:
    """The PKCS#8 DER of a key under Sun's JKS key protector."""
    try:
        tag, start, _ = _der_item(protected, 0)             # EncryptedPrivateKeyInfo SEQUENCE
        _, alg_start, alg_end = _der_item(protected, start)  # AlgorithmIdentifier SEQUENCE
        oid_tag, oid_start, oid_end = _der_item(protected, alg_start)
        oid = protected[oid_start - 2:oid_end]
        octet_tag, enc_start, enc_end = _der_item(protected, alg_end)
    except IndexError:
        raise KafkaConfigError(f"{option}={path!r}: a key entry is corrupt") from None
    if tag != 0x30 or oid_tag != 0x06 or octet_tag != 0x04 or oid != _SUN_KEY_PROTECTOR:
        raise KafkaConfigError(
            f"{option}={path!r}: a key entry is not protected the JKS way (OID "
            f"{protected[oid_start:oid_end].hex()}); convert the store to PKCS#12 with keytool "
            "-importkeystore -deststoretype PKCS12")
    enc = protected[enc_start:enc_end]
    if len(enc) < 41:
        raise KafkaConfigError(f"{option}={path!r}: a key entry is corrupt")
    salt, body, check = enc[:20], enc[20:-20], enc[-20:]
    pw = password.encode("utf-16-be")
    stream = bytearray()
    block = salt
    while len(stream) < len(body):
        block = hashlib.sha1(pw + block).digest()
        stream += block
    plain = bytes(a ^ b for a, b in zip(body, stream))
    if not hmac.compare_digest(hashlib.sha1(pw + plain).digest(), check):
        raise KafkaConfigError(
            f"{password_option} is not the password of the key in {option}={path!r} (Java "
            "uses kafka.ssl.key.password for the key, else the store's password)")
    return plain


def _pkcs12(data: bytes, password: str | None, option: str, path: str, password_option: str):
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_pkcs12(data, None if password is None else password.encode("utf-8"))
    except (ValueError, TypeError):
        raise KafkaConfigError(
            f"could not open {option}={path!r}: it is neither JKS nor PKCS#12, or "
            f"{password_option} is not its password"
            + (" (it is not set)" if password is None else "")) from None


def read_truststore(path: str, password: str | None) -> str:
    """The certificates a JKS or PKCS#12 trust store makes Java trust, as one PEM text
    (``ssl.ca.pem``): its trusted certificate entries and each key entry's own certificate.

    The content decides the format, as in Java since 9 (a "JKS" store keytool made is often
    PKCS#12). The password is optional for JKS, as in Java (it only checks integrity).
    """
    option, pw_option = "kafka.ssl.truststore.location", "kafka.ssl.truststore.password"
    data = _read_file(option, path)
    if is_jks(data):
        entries = _parse_jks(data, password, option, path, pw_option)
        # Java's trust managers trust a key entry's own certificate too (the first of its chain).
        ders = entries.trusted + [chain[0] for _, _, chain in entries.keys if chain]
    elif len(data) >= 4 and struct.unpack(">I", data[:4])[0] == _JCEKS_MAGIC:
        raise KafkaConfigError(f"{option}={path!r} is a JCEKS store; export its CA certificates "
                               "to PEM (keytool -exportcert -rfc) and set kafka.ssl.ca.location")
    else:
        from cryptography.hazmat.primitives.serialization import Encoding

        p12 = _pkcs12(data, password, option, path, pw_option)
        certs = [c.certificate for c in p12.additional_certs]
        if p12.cert is not None:
            certs.append(p12.cert.certificate)
        ders = [c.public_bytes(Encoding.DER) for c in certs]
    if not ders:
        raise KafkaConfigError(f"{option}={path!r} holds no certificate to trust")
    return "".join(_pem_cert(d) for d in ders)


def read_pkcs12_keystore(path: str, password: str | None) -> ClientIdentity:
    """The client certificate chain and key of a PKCS#12 keystore (librdkafka's format), for
    the driver's commit client, which cannot hand the file to OpenSSL as librdkafka does."""
    from cryptography.hazmat.primitives.serialization import (
        Encoding, NoEncryption, PrivateFormat, pkcs12)

    option = "kafka.ssl.keystore.location"
    data = _read_file(option, path)
    try:
        key, cert, chain = pkcs12.load_key_and_certificates(data, (password or "").encode("utf-8"))
    except (ValueError, TypeError):
        raise KafkaConfigError(
            f"could not open the PKCS#12 keystore {option}={path!r}: the file is not PKCS#12 (a "
            "JCEKS keystore? convert it with keytool -importkeystore -deststoretype PKCS12) or "
            "kafka.ssl.keystore.password is not its password") from None
    if key is None or cert is None:
        raise KafkaConfigError(
            f"the keystore {option}={path!r} holds no "
            f"{'private key' if key is None else 'certificate'} for the client; it needs the "
            "client's certificate and its key (a trust store goes in kafka.ssl.ca.location)")
    chain_pem = b"".join(c.public_bytes(Encoding.PEM) for c in [cert, *(chain or [])])
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    return ClientIdentity(chain_pem.decode("ascii"), key_pem.decode("ascii"))


def read_jks_keystore(path: str, store_password: str | None, key_password: str | None
                      ) -> ClientIdentity:
    """The client certificate chain and key of a JKS keystore (one key entry)."""
    option, pw_option = "kafka.ssl.keystore.location", "kafka.ssl.keystore.password"
    if store_password is None:
        raise KafkaConfigError(f"{option} is a JKS keystore and needs {pw_option}")
    data = _read_file(option, path)
    entries = _parse_jks(data, store_password, option, path, pw_option)
    if len(entries.keys) != 1:
        raise KafkaConfigError(
            f"{option}={path!r} holds {len(entries.keys)} private keys; the client needs exactly "
            "one (Java would pick by alias, which librdkafka cannot)")
    alias, protected, chain = entries.keys[0]
    key_pw_option = "kafka.ssl.key.password" if key_password is not None else pw_option
    der = _unprotect_jks_key(protected, key_password if key_password is not None
                             else store_password, option, path, key_pw_option)
    key_pem = _pem("PRIVATE KEY", der)
    if not chain:
        raise KafkaConfigError(f"{option}={path!r}: key {alias!r} has no certificate")
    return ClientIdentity("".join(_pem_cert(d) for d in chain), key_pem)
