"""Keeps passwords, keys and tokens out of logs, errors and reprs."""

from __future__ import annotations

import re
from typing import Iterable, Mapping
from urllib.parse import unquote

REDACTED = "[redacted]"

# Option names (with or without the "kafka." prefix) whose values are secrets: of the key store
# settings only the passwords and Java's PEM private key (ssl.keystore.key); its location, type
# and certificate chain are a path, a name and a public certificate, which messages must show.
# Beyond Kafka's own names, the common spellings of a secret in other settings a user may pass
# along (Schema Registry's basic.auth.user.info "user:password", an access or API key, passwd).
_SECRET_KEY = re.compile(
    r"(password|passwd|pwd|passphrase|secret|token|sasl\.jaas\.config|ssl\.key\.pem|"
    r"ssl\.keystore\.key\b|sasl\.oauthbearer\.config|credential|private|user\.info|"
    r"access[._-]?key|api[._-]?key)",
    re.IGNORECASE,
)

# A part of a multi-part value (sasl.oauthbearer.config, JAAS) shorter than this is too common a
# string ("x", "true") to be worth hiding, and hiding it would garble the rest of the message.
_MIN_PART = 4
_PARTS = re.compile(r"[\s,;]+")
# librdkafka echoes the unparsed rest of a value: "Unrecognized sasl.oauthbearer.config beginning
# at: <rest>". The rest can be any part of the secret, so everything after the marker goes.
_ECHO = re.compile(rf"({_SECRET_KEY.pattern}[^\n]*?\bbeginning at:).*", re.IGNORECASE | re.DOTALL)

# Spark's spark.sql.redaction.options.regex by this rule. Spark shows a data source's options in
# query plans (explain, the SQL tab, the event log, a failed query's error), hiding those whose
# name or value its two rules match: this one, whose default "(?i)url" is kept, and
# spark.redaction.regex (password, secret, token, access key), which misses a PEM private key
# (kafka.ssl.keystore.key, kafka.ssl.key.pem) and kafka.sasl.oauthbearer.config. The pattern
# reads the same in Java's regex syntax.
SPARK_OPTIONS_REDACTION_REGEX = "(?i)url|" + _SECRET_KEY.pattern


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def redact_config(conf: Mapping[str, object]) -> dict[str, object]:
    """A copy of ``conf`` with every secret value replaced."""
    return {k: (REDACTED if is_secret_key(str(k)) and v is not None else v) for k, v in conf.items()}


def redact_command_line(words: Iterable[str]) -> str:
    """``words`` (a command line) joined by spaces, fit for a record or a message: the value of
    every ``KEY=VALUE`` word whose key names a secret (``-X sasl.password=...``,
    ``--spark-conf spark.hadoop.fs.s3a.secret.key=...``, ``--conf=sasl.jaas.config=...``)
    replaced. A value may hold ``=`` itself, so the key ends at the first ``=`` after which the
    text so far names a secret."""
    out = []
    for word in words:
        end = word.find("=")
        while end >= 0 and not is_secret_key(word[:end]):
            end = word.find("=", end + 1)
        out.append(word if end < 0 else f"{word[:end]}={REDACTED}")
    return " ".join(out)


# Entries of librdkafka's unsecured-JWT sasl.oauthbearer.config that name the principal and the token's
# shape, not a secret: hiding them wherever they appear would garble messages (a principal 'writer',
# a topic containing the scope). The whole value, extension values and any other entry stay hidden.
_PUBLIC_OAUTHBEARER_ENTRIES = ("principal", "principalClaimName", "scope", "scopeClaimName",
                               "lifeSeconds")


def _secret_parts(value: str, key: str = "") -> set[str]:
    """The strings of a secret value that may appear in a message on their own: the whole value,
    each separated token and each ``key=value``'s value (quotes stripped)."""
    parts = {value} if len(value) >= 3 else set()
    public = key.lower().endswith("sasl.oauthbearer.config")
    for token in _PARTS.split(value):
        if public and token.partition("=")[0] in _PUBLIC_OAUTHBEARER_ENTRIES:
            continue
        for part in (token, token.partition("=")[2]):
            part = part.strip("\"'")
            if len(part) >= _MIN_PART:
                parts.add(part)
    return parts


def redact_text(text: str, conf: Mapping[str, object]) -> str:
    """Remove from ``text`` (e.g. a library error) every secret value of ``conf``, any part of a
    multi-part one, and whatever follows a "<secret option> beginning at:" echo."""
    parts: set[str] = set()
    for k, v in conf.items():
        if v is not None and is_secret_key(str(k)):
            parts |= _secret_parts(str(v), str(k))
    for part in sorted(parts, key=len, reverse=True):  # longest first: a part may hold another
        if part in text:
            text = text.replace(part, REDACTED)
    return _ECHO.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


def redact_uri(uri: str) -> str:
    """``uri`` fit for a message: without user:password@ (inline S3 keys) and without the query
    string or fragment (tokens, signatures). A plain path comes back unchanged.

    Everything up to the last ``@`` counts as credentials: a raw (not percent-encoded) secret may
    hold ``/``, ``?`` or ``#``, so over-redacting an odd path beats showing half a key.
    """
    m = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*://)(.*)", uri, re.DOTALL)
    if m is None:
        return uri
    scheme, rest = m.groups()
    if "@" in rest:
        rest = f"{REDACTED}@{rest.rsplit('@', 1)[1]}"
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=-1)
    if cut >= 0:
        rest = f"{rest[:cut]}?{REDACTED}"
    return scheme + rest


def redact_uri_text(text: str, uri: str) -> str:
    """``text`` (e.g. a filesystem library's error about ``uri``) without ``uri``'s credentials,
    whether the library echoed the URI whole, decoded, or only its user info or query."""
    safe = redact_uri(uri)
    if safe == uri:
        return text
    for form in {uri, unquote(uri)}:
        text = text.replace(form, safe)
    m = re.match(r"[A-Za-z][A-Za-z0-9+.\-]*://(.*)", uri, re.DOTALL)
    rest = m.group(1) if m else ""
    userinfo = rest.rsplit("@", 1)[0] if "@" in rest else ""
    query = re.split(r"[?#]", rest.rsplit("@", 1)[-1], maxsplit=1)[1:]
    pieces = [userinfo, *userinfo.split(":", 1), *query]
    pieces += [p for q in query for kv in re.split(r"[&#]", q) for p in (kv, kv.partition("=")[2])]
    for piece in sorted({x for p in pieces for x in (p, unquote(p))}, key=len, reverse=True):
        if len(piece) >= _MIN_PART and piece in text:
            text = text.replace(piece, REDACTED)
    return text
