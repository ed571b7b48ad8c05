"""The ``kafka.*`` options: passed to librdkafka without the prefix, after translation and checks.

Why: users move queries over from Spark's ``format("kafka")``, whose ``kafka.*`` keys are Java client
settings. Most share librdkafka's names; the ones that do not are translated where the meaning is the
same (``sasl.jaas.config`` with a PLAIN/SCRAM login module) and rejected with the equivalent named
otherwise, so a query never starts with a setting silently ignored.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from .errors import KafkaConfigError
from .secrets_redaction import redact_config

KAFKA_PREFIX = "kafka."

# Java client keys with no librdkafka key of the same name: what to use instead.
_JAVA_ONLY: dict[str, str] = {
    "ssl.truststore.location": "kafka.ssl.ca.location (a PEM file of the CA certificates)",
    "ssl.truststore.password": "kafka.ssl.ca.location (PEM needs no password)",
    "ssl.truststore.type": "kafka.ssl.ca.location (PEM)",
    "ssl.truststore.certificates": "kafka.ssl.ca.pem",
    "ssl.keystore.type": "kafka.ssl.keystore.location (PKCS#12) or kafka.ssl.certificate.location "
                         "+ kafka.ssl.key.location (PEM)",
    "ssl.keystore.certificate.chain": "kafka.ssl.certificate.pem",
    "ssl.keystore.key": "kafka.ssl.key.pem",
    "ssl.key.password.location": "kafka.ssl.key.password",
    "sasl.login.callback.handler.class": "kafka.sasl.username / kafka.sasl.password",
    "sasl.client.callback.handler.class": "kafka.sasl.username / kafka.sasl.password",
    "max.poll.records": "maxOffsetsPerTrigger / maxRecordsPerPartition (the reader bounds batches)",
    "max.poll.interval.ms": "nothing: txkafka assigns partitions, it never joins a group",
    "buffer.memory": "kafka.queue.buffering.max.kbytes",
    "interceptor.classes": "nothing: Java interceptors cannot run in librdkafka",
    "metric.reporters": "nothing: Java metric reporters cannot run in librdkafka",
    "client.dns.lookup": "kafka.client.dns.lookup is Java-only; librdkafka resolves every address",
    "default.api.timeout.ms": "kafka.socket.timeout.ms / fetchOffset.retryIntervalMs",
    "delivery.timeout.ms": "kafka.message.timeout.ms (librdkafka's name)",
}

# Keys the user may not set: the connector owns them.
_OWNED_COMMON: dict[str, str] = {
    "key.serializer": "keys are written as bytes: cast the key column to string or binary",
    "value.serializer": "values are written as bytes: cast the value column to string or binary",
    "key.deserializer": "keys are always read as bytes: use DataFrame operations to deserialize",
    "value.deserializer": "values are always read as bytes: use DataFrame operations to deserialize",
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
            conf.update(parse_jaas_config(str(value)))
            continue
        if lname == "sasl.mechanisms":
            lname = "sasl.mechanism"
        conf[lname] = str(value)
    for req in required:
        if not conf.get(req):
            raise KafkaConfigError(
                f"option 'kafka.{req}' is required (for example "
                f"option(\"kafka.{req}\", \"host1:9092,host2:9092\"))"
            )
    return conf


def describe_config(conf: Mapping[str, object]) -> str:
    """A secret-free rendering of a client config, for reprs and logs."""
    red = redact_config(conf)
    return "{" + ", ".join(f"{k}={red[k]!s}" for k in sorted(red)) + "}"
