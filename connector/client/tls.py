"""TLS material for Python's ``ssl``, given the way librdkafka's options give it.

Why: the driver's commit client (connection) and its OIDC token fetch (oauthbearer)
both build SSL contexts from librdkafka-style settings: a CA file, a directory of hashed CA files
or ``probe``, inline PEM, and a client certificate as files or inline PEM. Python's ssl loads a
client certificate from files only, so inline material goes through 0600 temporary files removed
at once, a private key always encrypted under a one-time passphrase first.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import ssl
import tempfile

from ..errors import KafkaConfigError


def trust_context(location: str | None, pem: str | None, *, location_option: str,
                  pem_option: str, purpose: str = "") -> ssl.SSLContext:
    """A client context trusting ``location`` (file, hashed directory, or ``probe``/unset for
    the system store) and/or the inline ``pem``; errors name the options."""
    cafile = capath = None
    if location and location.lower() != "probe":  # librdkafka's "probe": the system's CA store
        if os.path.isdir(location):
            capath = location  # librdkafka accepts a directory of hashed CA certificates too
        elif os.path.isfile(location):
            cafile = location
        else:
            raise KafkaConfigError(f"{location_option}={location!r} is not a file or directory")
    try:
        ctx = ssl.create_default_context(cafile=cafile, capath=capath, cadata=pem)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise KafkaConfigError(
            f"could not load the CA certificates of {location_option}={location!r} / "
            f"{pem_option}{purpose}: {type(e).__name__}: {e}") from None
    # Python 3.13 turned on OpenSSL's X509_STRICT here (RFC 5280 checks: a certificate without
    # an Authority Key Identifier fails, as many keytool- and openssl-made ones do). librdkafka
    # verifies without it, and the driver must accept exactly the brokers the tasks accept.
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return ctx


def load_client_identity(ctx: ssl.SSLContext, *, cert_path: str | None, cert_pem: str | None,
                         key_path: str | None, key_pem: str | None, key_password: str | None,
                         where: str, hint: str = "") -> None:
    """Load a client certificate chain and key into ``ctx`` from files or inline PEM.

    ``where`` names the options the material came from, for errors; ``hint`` is added to them.
    """
    if key_pem and not key_path and "ENCRYPTED" not in key_pem:
        # An inline key in the clear reaches its temporary file encrypted.
        key_password = secrets.token_hex(16)
        key_pem = _encrypted_key_pem(key_pem, key_password)
    tmp: list[str] = []
    try:
        def as_file(path: str | None, pem: str | None) -> str | None:
            if path or not pem:
                return path
            fd, name = tempfile.mkstemp(prefix="txkafka-", suffix=".pem")
            tmp.append(name)
            with os.fdopen(fd, "w") as fh:
                fh.write(pem)
            return name

        cert = as_file(cert_path, cert_pem)
        key = as_file(key_path, key_pem)
        try:
            ctx.load_cert_chain(cert, key, password=key_password)  # type: ignore[arg-type]
        except (ssl.SSLError, OSError) as e:
            raise KafkaConfigError(
                f"could not load the client certificate/key ({where}): {type(e).__name__}: "
                f"{e.args[-1] if e.args else e}.{(' ' + hint) if hint else ''}") from None
    finally:
        for name in tmp:
            with contextlib.suppress(OSError):
                os.unlink(name)


def _encrypted_key_pem(key_pem: str, passphrase: str) -> str:
    """``key_pem`` (unencrypted PEM) as PKCS#8 PEM encrypted under ``passphrase``."""
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption, Encoding, PrivateFormat, load_pem_private_key)

    try:
        key = load_pem_private_key(key_pem.encode("ascii"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError):
        raise KafkaConfigError(
            "kafka.ssl.key.pem is not a PEM private key (or it is encrypted without saying so; "
            "give its password in kafka.ssl.key.password)") from None
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8,
                             BestAvailableEncryption(passphrase.encode("ascii"))).decode("ascii")
