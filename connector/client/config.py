"""The ``kafka.*`` options: passed to librdkafka without the prefix, after translation and checks.

Why: users move queries over from Spark's ``format("kafka")``, whose ``kafka.*`` keys are Java client
settings. Most share librdkafka's names; the ones that do not are translated where the meaning is the
same (``sasl.jaas.config`` with a PLAIN/SCRAM login module) and rejected with the equivalent named
otherwise, so a query never starts with a setting silently ignored.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Callable, Iterable, Mapping

from . import keystores as java_keystores
from ..errors import KafkaConfigError
from ..option_names import KAFKA_PREFIX
from ..secrets_redaction import redact_config, redact_text

# librdkafka pauses half of reconnect.backoff.ms (its "sparse connection" pause) before connecting
# to the broker the bootstrap metadata names, which every new producer and admin client does before
# its first real request: every task's transactional producer and every query start paid librdkafka's
# 100 ms default. It is also the first step of the exponential reconnect backoff (up to
# reconnect.backoff.max.ms), so a broker that is down only sees a few more attempts at first.
# Java's client default is 50 ms. A user's kafka.reconnect.backoff.ms wins.
RECONNECT_BACKOFF_MS = 20

# SASL mechanisms txkafka's own connections speak (connection: the driver's transaction
# client, the executors' fetch); GSSAPI/Kerberos is librdkafka's only.
TXKAFKA_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

# TLS settings only librdkafka (OpenSSL) applies: txkafka's connections would ignore them, and a
# cipher restriction must never be dropped silently. (ssl.crl.location they apply.)
LIBRDKAFKA_TLS_KEYS = ("ssl.cipher.suites", "ssl.curves.list",
                       "ssl.sigalgs.list", "ssl.providers", "ssl.engine.location", "ssl.engine.id",
                       "ssl.ca.certificate.stores")


# The connection settings txkafka's own connections apply (client.connection.SecurityConfig, the
# OAUTHBEARER token sources of client.oauthbearer), for its fetch and its producer alike; with
# every ssl.* and sasl.* key (wire_connection_key), checked further by wire_unsupported.
WIRE_CONNECTION_KEYS = frozenset({
    "bootstrap.servers", "client.id", "security.protocol",
    "enable.ssl.certificate.verification",
    "enable.sasl.oauthbearer.unsecure.jwt", "https.ca.location", "https.ca.pem",
})


def wire_connection_key(key: str) -> bool:
    """Whether txkafka's own connections apply the client setting ``key``."""
    return key in WIRE_CONNECTION_KEYS or key.startswith(("ssl.", "sasl."))


def wire_unsupported(conf: Mapping[str, str]) -> str | None:
    """Why txkafka's own connections (its fetch, its producer) cannot serve this client config, or
    None.

    String checks only: this runs in the Python process Spark starts for every query, where
    importing the connection code (ssl, urllib, ...) would lengthen each query's start.
    """
    if conf.get("client.rack"):
        return ("kafka.client.rack is set: fetching from the closest replica (KIP-392) is "
                "librdkafka's")
    if str(conf.get("check.crcs", "false")).strip().lower() == "true":
        return "kafka.check.crcs=true: CRC checks of fetched batches are librdkafka's"
    protocol = str(conf.get("security.protocol") or "PLAINTEXT").strip().upper()
    if "SSL" in protocol:
        tls = [k for k in LIBRDKAFKA_TLS_KEYS if conf.get(k)]
        if tls:
            return f"kafka.{tls[0]} is set: only librdkafka's TLS (OpenSSL) applies it"
    mech = str(conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "GSSAPI").strip()
    if protocol.startswith("SASL") and mech.upper() not in TXKAFKA_SASL_MECHANISMS:
        return (f"kafka.sasl.mechanism={mech!r}: txkafka's own fetch supports "
                f"{', '.join(TXKAFKA_SASL_MECHANISMS)} (GSSAPI/Kerberos is librdkafka's)")
    metadata = str(conf.get("sasl.oauthbearer.metadata.authentication.type") or "none")
    if metadata.strip().lower() != "none":  # a sasl.* key txkafka's own logins lack
        return (f"kafka.sasl.oauthbearer.metadata.authentication.type={metadata!r}: OAUTHBEARER "
                "tokens from cloud metadata are librdkafka's")
    return None


def delivery_timeout_ms(conf: Mapping[str, object],
                        transaction_timeout_ms: int | None = None) -> float:
    """How long a record may wait for its delivery, in ms: kafka.message.timeout.ms (or
    delivery.timeout.ms; librdkafka's default 300000, and its 0 means no limit: ``math.inf``),
    capped by ``transaction_timeout_ms`` when the record is in a transaction, which it must not
    outlive. One rule for both producers."""
    raw = conf.get("message.timeout.ms", conf.get("delivery.timeout.ms"))
    ms = float(int(str(raw).strip())) if raw is not None else 300_000.0
    if ms <= 0:
        ms = math.inf
    if transaction_timeout_ms is not None:
        ms = min(ms, float(transaction_timeout_ms))
    return ms


# Java client keys with no librdkafka key of the same name: what to use instead.
_JAVA_ONLY: dict[str, str] = {
    "ssl.key.password.location": "kafka.ssl.key.password",
    "ssl.protocol": "nothing: librdkafka negotiates the highest TLS version both sides support",
    "ssl.enabled.protocols": "nothing: librdkafka negotiates the highest TLS version both sides "
                             "support (kafka.ssl.cipher.suites restricts ciphers)",
    "ssl.keymanager.algorithm": "nothing: librdkafka uses OpenSSL, not Java's key managers",
    "ssl.trustmanager.algorithm": "nothing: librdkafka uses OpenSSL, not Java's trust managers",
    "ssl.secure.random.implementation": "nothing: librdkafka uses OpenSSL's random source",
    "ssl.engine.factory.class": "kafka.ssl.engine.location (an OpenSSL engine)",
    "security.providers": "nothing: Java security providers cannot run in librdkafka",
    "ssl.provider": "nothing: a Java security provider cannot run in librdkafka, whose TLS is "
                    "OpenSSL's (kafka.ssl.providers, a different setting, loads OpenSSL 3 "
                    "providers such as 'default,legacy')",
    "sasl.login.class": "kafka.sasl.username / kafka.sasl.password (or kafka.sasl.oauthbearer.*)",
    "sasl.login.callback.handler.class": "kafka.sasl.username / kafka.sasl.password",
    "sasl.client.callback.handler.class": "kafka.sasl.username / kafka.sasl.password",
    "sasl.login.refresh.window.factor": "nothing: librdkafka refreshes OAUTHBEARER tokens itself",
    "buffer.memory": "kafka.queue.buffering.max.kbytes",
    "max.block.ms": "nothing: librdkafka's produce never blocks; the sink waits out a full queue "
                    "until kafka.message.timeout.ms",
    "max.request.size": "kafka.message.max.bytes",
    "partitioner.class": "nothing: keyed records go where Java's default partitioner puts them "
                         "(librdkafka's murmur2_random); set a partition column to choose",
    "send.buffer.bytes": "kafka.socket.send.buffer.bytes",
    "receive.buffer.bytes": "kafka.socket.receive.buffer.bytes",
    "fetch.max.wait.ms": "kafka.fetch.wait.max.ms",
    "exclude.internal.topics": "nothing: txkafka reads only the topics its subscribe, "
                               "subscribePattern or assign option names",
    "metadata.max.idle.ms": "kafka.metadata.max.age.ms",
    "interceptor.classes": "nothing: Java interceptors cannot run in librdkafka",
    "metric.reporters": "nothing: Java metric reporters cannot run in librdkafka",
    "auto.include.jmx.reporter": "nothing: librdkafka has no JMX; see kafka.statistics.interval.ms",
    "default.api.timeout.ms": "kafka.socket.timeout.ms / fetchOffset.retryIntervalMs",
}

# Java's key and trust store settings (JKS, PKCS#12, KIP-651's PEM stores): translated into what
# librdkafka reads (see _translate_stores).
_STORE_KEYS = frozenset({
    "ssl.keystore.type", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates", "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
})
_STORE_RENAMES = {
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "ssl.keystore.key": "ssl.key.pem",
}

# Java names librdkafka knows under another name with the same meaning: renamed, so the checks
# that read the librdkafka name (the sink caps message.timeout.ms by its transaction) see them.
_RENAMED: dict[str, str] = {
    "sasl.mechanisms": "sasl.mechanism",
    "delivery.timeout.ms": "message.timeout.ms",
}

# One text for reader and writer: Kafka keys and values are bytes to both.
_AS_BYTES = ("txkafka reads {0}s as binary and writes a string or binary {0} column: convert "
             "with DataFrame operations (CAST, from_json/to_json, from_avro/to_avro)")
# Keys the user may not set: the connector owns them.
_OWNED_COMMON: dict[str, str] = {
    "key.serializer": _AS_BYTES.format("key"),
    "value.serializer": _AS_BYTES.format("value"),
    "key.deserializer": _AS_BYTES.format("key"),
    "value.deserializer": _AS_BYTES.format("value"),
}


def parse_jaas_config(text: str) -> dict[str, str]:
    """Translate a PLAIN or SCRAM ``sasl.jaas.config`` into librdkafka's username/password."""
    m = re.match(r"\s*([\w.$]+)\s+(required|optional|requisite|sufficient)\s*(.*?);?\s*$", text,
                 re.DOTALL)
    if not m:
        raise KafkaConfigError(
            "kafka.sasl.jaas.config is not of the form '<LoginModule> required key=\"value\" ...;'"
        )
    module, rest = m.group(1), m.group(3)
    if not module.endswith(("PlainLoginModule", "ScramLoginModule")):
        raise KafkaConfigError(
            f"kafka.sasl.jaas.config uses {module}; txkafka translates only PlainLoginModule and "
            "ScramLoginModule. Set kafka.sasl.username and kafka.sasl.password (or the librdkafka "
            "settings of your mechanism) instead."
        )
    pairs = {k: re.sub(r"\\(.)", r"\1", v)
             for k, v in re.findall(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', rest)}
    if "username" not in pairs or "password" not in pairs:
        raise KafkaConfigError("kafka.sasl.jaas.config needs username=\"...\" and password=\"...\"")
    return {"sasl.username": pairs["username"], "sasl.password": pairs["password"]}


def kafka_client_config(
    options: Mapping[str, str],
    *,
    owned: Mapping[str, str] | None = None,
    required: Iterable[str] = ("bootstrap.servers",),
) -> dict[str, str]:
    """Collect ``kafka.*`` options into a librdkafka config dict (prefix stripped).

    ``owned`` maps keys the caller sets itself to the reason shown when a user tries to set them.
    """
    conf: dict[str, str] = {}
    jaas: dict[str, str] = {}
    stores: dict[str, str] = {}
    owned_all = {**_OWNED_COMMON, **(owned or {})}
    for raw_key, value in options.items():
        key = str(raw_key)
        if not key.lower().startswith(KAFKA_PREFIX):
            continue
        name = key[len(KAFKA_PREFIX):]
        lname = name.lower()
        if lname in owned_all:
            raise KafkaConfigError(f"option 'kafka.{lname}' is not supported: {owned_all[lname]}")
        if lname in _JAVA_ONLY:
            raise KafkaConfigError(
                f"option 'kafka.{lname}' is a Java client setting that librdkafka does not have; "
                f"use {_JAVA_ONLY[lname]}"
            )
        if lname == "sasl.jaas.config":
            jaas = parse_jaas_config(str(value))  # merged below, whatever the options' order
            continue
        if lname in _STORE_KEYS:
            stores[lname] = str(value)  # translated below, whatever the options' order
            continue
        if lname in _RENAMED:
            target = _RENAMED[lname]
            if target in conf and conf[target] != str(value):
                raise KafkaConfigError(
                    f"options 'kafka.{lname}' and 'kafka.{target}' are the same setting for "
                    f"librdkafka and disagree ({value!r} vs {conf[target]!r}); keep one")
            conf[target] = str(value)
            continue
        if lname in {v for v in _RENAMED.values()} and lname in conf and conf[lname] != str(value):
            raise KafkaConfigError(
                f"option 'kafka.{lname}' and its Java name disagree ({value!r} vs "
                f"{conf[lname]!r}); keep one")
        if lname == "ssl.endpoint.identification.algorithm" and not str(value).strip():
            value = "none"  # Java's way to turn the host check off; librdkafka refuses ""
        conf[lname] = str(value)
    for key, value in jaas.items():
        if key in conf and conf[key] != value:
            # No values in the message: one of them is a password.
            raise KafkaConfigError(
                f"options 'kafka.sasl.jaas.config' and 'kafka.{key}' both set the SASL "
                f"{key.split('.')[-1]} and disagree; keep one")
        conf[key] = value
    _translate_stores(stores, conf)
    for req in required:
        if not str(conf.get(req) or "").strip():
            raise KafkaConfigError(
                f"option 'kafka.{req}' is required (for example "
                f"option(\"kafka.{req}\", \"host1:9092,host2:9092\"))"
            )
    return conf


def refuse_two_client_identities(get: Callable[[str], str | None]) -> None:
    """A keystore and a PEM certificate/key both set: librdkafka would quietly use the keystore,
    so every client (reader, either sink, the driver's commit client) refuses the ambiguity."""
    if not get("ssl.keystore.location"):
        return
    pem_set = [f"kafka.{k}" for k in ("ssl.certificate.location", "ssl.certificate.pem",
                                      "ssl.key.location", "ssl.key.pem") if get(k)]
    if pem_set:
        raise KafkaConfigError(
            f"kafka.ssl.keystore.location and {', '.join(pem_set)} both give the client "
            "certificate; set one: the keystore, or the PEM certificate and key")


def _translate_stores(stores: Mapping[str, str], conf: dict[str, str]) -> None:
    """Apply Java's store settings to ``conf`` as librdkafka settings, or raise KafkaConfigError.

    librdkafka reads a client keystore as PKCS#12 (``ssl.keystore.location``) or PEM
    (``ssl.certificate.*``/``ssl.key.*``) and CA certificates as PEM only. Java's PEM stores
    (KIP-651) are those PEM settings under other names; JKS stores, and PKCS#12 trust stores,
    are read here (connector/client/keystores.py) into librdkafka's inline PEM settings, on the
    driver and on each executor alike, so the files must exist where Java would need them too.
    """
    def put(key: str, value: str, java: str) -> None:
        if key in conf and conf[key] != value:
            raise KafkaConfigError(
                f"options '{java}' and 'kafka.{key}' are the same setting for librdkafka and "
                "disagree; keep one")
        conf[key] = value

    for java, key in _STORE_RENAMES.items():
        if java in stores:
            put(key, stores[java], f"kafka.{java}")

    ks_type = stores.get("ssl.keystore.type", "").strip().upper()
    if ks_type not in ("", "JKS", "PKCS12", "PEM"):
        raise KafkaConfigError(
            f"kafka.ssl.keystore.type={stores['ssl.keystore.type']!r} is not JKS, PKCS12 or PEM: "
            "set kafka.ssl.keystore.location to a JKS or PKCS#12 file, or "
            "kafka.ssl.certificate.location and kafka.ssl.key.location to PEM files")
    ks_loc = conf.get("ssl.keystore.location")
    if ks_type == "PEM" and ks_loc:
        raise KafkaConfigError(
            "kafka.ssl.keystore.type=PEM with kafka.ssl.keystore.location: give the PEM "
            "certificate and key as kafka.ssl.certificate.location and kafka.ssl.key.location")
    refuse_two_client_identities(conf.get)
    # The content decides, as in Java since 9 (keystore.type.compat): a store keytool made and
    # named .jks is often PKCS#12, which librdkafka reads as it is.
    if ks_loc and java_keystores.is_jks_file(ks_loc):
        ident = java_keystores.read_jks_keystore(ks_loc, conf.get("ssl.keystore.password"),
                                                 conf.get("ssl.key.password"))
        for key in ("ssl.keystore.location", "ssl.keystore.password", "ssl.key.password"):
            conf.pop(key, None)
        conf["ssl.certificate.pem"] = ident.certificate_chain_pem
        conf["ssl.key.pem"] = ident.key_pem

    ts_type = stores.get("ssl.truststore.type", "").strip().upper()
    if ts_type not in ("", "JKS", "PKCS12", "PEM"):
        raise KafkaConfigError(
            f"kafka.ssl.truststore.type={stores['ssl.truststore.type']!r} is not JKS, PKCS12 or "
            "PEM; librdkafka reads CA certificates as PEM: set kafka.ssl.ca.location to a PEM file")
    ts_loc = stores.get("ssl.truststore.location")
    ts_password = stores.get("ssl.truststore.password")
    if ts_type == "PEM" and ts_password is not None:
        raise KafkaConfigError(
            "kafka.ssl.truststore.password: a PEM trust store has no password (Java refuses one "
            "too); remove it")
    if ts_loc is None:
        if ts_password is not None:
            raise KafkaConfigError(
                "kafka.ssl.truststore.password is set without kafka.ssl.truststore.location")
        return
    if ts_type == "PEM":
        put("ssl.ca.location", ts_loc, "kafka.ssl.truststore.location")
        return
    if conf.get("ssl.ca.location") or conf.get("ssl.ca.pem"):
        raise KafkaConfigError(
            "kafka.ssl.truststore.location and kafka.ssl.ca.location/kafka.ssl.ca.pem both give "
            "the CA certificates; set one")
    conf["ssl.ca.pem"] = java_keystores.read_truststore(ts_loc, ts_password)


_BACKTICKED = re.compile(r"`([A-Za-z0-9._]+)`")
_QUOTED_PROPERTY = re.compile(r'property:? "([A-Za-z0-9._]+)"')


_DOTLESS_KEYS = {"acks", "retries", "partitioner", "debug", "interceptors"}


def _name_options(librdkafka_text: str, conf: Mapping[str, object]) -> str:
    """librdkafka's `x` / property "x" as the option the user set: 'kafka.x' (values it quotes
    the same way, such as `all`, stay as they are). librdkafka names a setting by its own name,
    which may be an alias of the key in ``conf`` (`max.in.flight` for
    max.in.flight.requests.per.connection): the key given is named. Idempotence is txkafka's
    choice, never the user's setting."""
    text = _IDEMPOTENCE_RULE.sub("because txkafka always enables idempotence", librdkafka_text)

    def option(m: re.Match) -> str:
        name = m.group(1)
        given = _given_key(name, conf)
        if given is not None:
            return f"'kafka.{given}'"
        return f"'kafka.{name}'" if "." in name or name in _DOTLESS_KEYS else f"'{name}'"

    text = _BACKTICKED.sub(option, text)
    return _QUOTED_PROPERTY.sub(
        lambda m: f"property 'kafka.{_given_key(m.group(1), conf) or m.group(1)}'", text)


# librdkafka's combination checks of an idempotent producer ("`retries` must be set >= 1 when
# `enable.idempotence` is true"): txkafka sets it, the user cannot.
_IDEMPOTENCE_RULE = re.compile(r"when `enable\.idempotence` is true")


def _given_key(name: str, conf: Mapping[str, object]) -> str | None:
    """The key of ``conf`` that is librdkafka's setting ``name`` (the same name or an alias)."""
    same = _CANONICAL.get(name, name)
    return next((str(k) for k in conf if _CANONICAL.get(str(k), str(k)) == same), None)


def check_client_config(conf: Mapping[str, object], client: str) -> None:
    """Create, then drop, the librdkafka ``client`` ("producer" or "consumer") the executors will
    create from ``conf``; raise KafkaConfigError with librdkafka's reason. ``client="any"``: the
    settings of several kinds of client (a command line's), so only what librdkafka refuses
    outright (a name it does not know, a value it cannot take) fails, not a setting of one kind.

    Why: librdkafka checks combinations (acks with idempotence, fetch sizes against each other)
    only when a client is created, so a bad pair would otherwise pass the driver and fail every
    task. Creating a client contacts no broker (sparse connections) and takes a few ms.
    """
    from confluent_kafka import Consumer, KafkaException, Producer

    factory = Consumer if client == "consumer" else Producer
    warnings = _CollectedLog()
    conf = {**conf, "logger": warnings.logger}  # this probe's log lines are read, not printed
    try:
        handle = factory(conf)
    except (KafkaException, ValueError, TypeError) as e:
        err = e.args[0] if isinstance(e, KafkaException) and e.args else None
        text = redact_text(err.str() if hasattr(err, "str") else str(e), conf)
        whose = "client" if client == "any" else client
        raise KafkaConfigError(
            f"librdkafka rejected the {whose} settings from the kafka.* options: "
            f"{_name_options(text, conf)}") from None
    # Serving the log queue delivers librdkafka's CONFWARN lines to ``warnings``.
    if client == "consumer":
        handle.close()
    else:
        handle.poll(0)
        del handle
    if client != "any":
        _reject_ignored_properties(warnings.messages, conf, client)


# librdkafka's CONFWARN for a property of the other client type, which it then ignores.
_IGNORED = re.compile(r"Configuration property (\S+) is a (producer|consumer) property and will be "
                      r"ignored")
# librdkafka's aliases (Java's names), by the canonical name its warnings use (its errors may use
# either: `retries`, `max.in.flight`).
_CANONICAL = {"linger.ms": "queue.buffering.max.ms", "retries": "message.send.max.retries",
              "acks": "request.required.acks", "compression.type": "compression.codec",
              "delivery.timeout.ms": "message.timeout.ms",
              "max.partition.fetch.bytes": "fetch.message.max.bytes",
              "max.in.flight": "max.in.flight.requests.per.connection",
              "bootstrap.servers": "metadata.broker.list", "sasl.mechanism": "sasl.mechanisms"}
_IGNORED_HINTS = {"request.timeout.ms": " (the consumer's request time-out is "
                                        "kafka.socket.timeout.ms)"}


class _CollectedLog(logging.Handler):
    """A private logger whose records (librdkafka's log lines) are kept, not printed."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []
        self.logger = logging.Logger("txkafka.config-check")  # unregistered: no global state
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _reject_ignored_properties(messages: list[str], conf: Mapping[str, object],
                               client: str) -> None:
    """A kafka.* key librdkafka accepts but ignores for this client (a producer property on the
    reader's consumer, e.g. Java's consumer setting request.timeout.ms; a consumer property on
    the sink's producer) fails like an unknown key: nothing is silently ignored."""
    for text in messages:
        m = _IGNORED.search(text)
        if m is None:
            continue
        name, kind = m.group(1), m.group(2)
        keys = [k for k in conf if _CANONICAL.get(str(k), str(k)) == _CANONICAL.get(name, name)]
        what = (f"option 'kafka.{keys[0]}' is" if keys else
                f"a kafka.* option (an alias of librdkafka's {name}) is")
        raise KafkaConfigError(
            f"{what} a librdkafka {kind} setting, which the {client} ignores"
            f"{_IGNORED_HINTS.get(name, '')}; drop it")


def describe_config(conf: Mapping[str, object]) -> str:
    """A secret-free rendering of a client config, for reprs and logs."""
    red = redact_config(conf)
    return "{" + ", ".join(f"{k}={red[k]!s}" for k in sorted(red)) + "}"
