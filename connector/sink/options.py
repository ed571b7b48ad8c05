"""The sink's options, parsed and validated once into a typed config.

Names follow Spark's ``kafka`` sink (``kafka.*``, ``topic``) plus Flink's ``deliveryGuarantee`` and
``transactionalIdPrefix``. Everything here is checked when the query starts, so bad input fails
before any transaction opens.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping

from ..errors import KafkaConfigError
from ..checkpoint.object_store import S3_OPTIONS, S3Settings, is_s3
from ..client.config import describe_config, kafka_client_config
from ..serde.options import FormatOptions, parse_format_options
from ..option_names import (LONG_MAX, MAX_TIMEOUT_MS, WRITER, check_option_names, integer,
                            one_of)

log = logging.getLogger("txkafka.writer")

DEFAULT_PREFIX = "txkafka"
# librdkafka's own default; the broker caps it with transaction.max.timeout.ms (15 min default).
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000

_SINK_OWNED = {
    "transactional.id": "the sink assigns transactional ids itself; set transactionalIdPrefix",
    "enable.idempotence": "the sink always writes with an idempotent producer",
    "auto.offset.reset": "a reader setting; it has no meaning for the sink",
    "enable.auto.commit": "a reader setting; it has no meaning for the sink",
}

# Kafka's rule for transactional ids is "any string"; we keep prefixes to ACL-friendly characters.
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._\-]{1,200}$")


class DeliveryGuarantee(str, Enum):
    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


def _get(options: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup that works for Spark's CaseInsensitiveDict and for plain dicts."""
    try:
        v = options.get(name)
    except Exception:  # noqa: BLE001
        v = None
    if v is not None:
        return str(v)
    low = name.lower()
    for k, val in options.items():
        if str(k).lower() == low:
            return None if val is None else str(val)
    return None


def _positive_int(options: Mapping[str, str], name: str, default: int, *, minimum: int = 1,
                  shown: str | None = None, maximum: int = LONG_MAX) -> int:
    """``shown``: the option's name in errors, when ``name`` is a key of the kafka.* config. An
    option given empty fails (it would otherwise take the default without a word)."""
    raw = _get(options, name)
    return default if raw is None else integer(shown or name, raw, minimum=minimum,
                                               maximum=maximum)


@dataclass(frozen=True)
class SinkConfig:
    """Everything the writer's tasks and its committer need, already validated."""

    kafka: dict[str, str] = field(repr=False)
    topic: str | None
    guarantee: DeliveryGuarantee
    transactional_id_prefix: str
    transaction_timeout_ms: int
    checkpoint_location: str | None
    commit_timeout_ms: int
    commit_parallelism: int
    # What the tasks write with: "txkafka" (client.producer) or "librdkafka" (confluent-kafka);
    # from_options decides (option producer, default auto).
    producer: str = "librdkafka"
    # The user's acknowledgement that every broker verifies transaction partitions where the
    # start checks cannot read the setting (a managed service that hides broker settings).
    assume_partition_verification: bool = False
    # The endpoint and credentials of an S3 checkpoint (fs.s3a.* options, else the AWS chain).
    s3: S3Settings | None = field(default=None, repr=False)
    formats: FormatOptions | None = None  # keyFormat/valueFormat; None: binary or string columns

    def __repr__(self) -> str:
        return (
            f"SinkConfig(topic={self.topic!r}, guarantee={self.guarantee.value}, "
            f"prefix={self.transactional_id_prefix!r}, "
            f"transaction_timeout_ms={self.transaction_timeout_ms}, "
            f"kafka={describe_config(self.kafka)})"
        )

    @property
    def exactly_once(self) -> bool:
        return self.guarantee is DeliveryGuarantee.EXACTLY_ONCE

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, streaming: bool) -> "SinkConfig":
        check_option_names(options, WRITER)
        kafka = kafka_client_config(options, owned=_SINK_OWNED)
        for name in ("acks", "request.required.acks"):  # librdkafka's alias
            acks = kafka.get(name)
            if acks is not None and acks.strip().lower() not in ("all", "-1"):
                raise KafkaConfigError(
                    f"option 'kafka.{name}' must be 'all' (or -1), got {acks!r}: txkafka writes "
                    "with an idempotent producer under both delivery guarantees, and idempotence "
                    "needs every in-sync replica's acknowledgement; drop the option")

        topic = _get(options, "topic")
        if topic is not None and not topic.strip():
            raise KafkaConfigError("option 'topic' is empty; give a topic name or drop the option")

        raw_guarantee = (_get(options, "deliveryGuarantee") or DeliveryGuarantee.EXACTLY_ONCE.value)
        try:
            guarantee = DeliveryGuarantee(raw_guarantee.strip().lower())
        except ValueError:
            raise KafkaConfigError(
                f"option 'deliveryGuarantee' must be 'exactly_once' or 'at_least_once', got "
                f"{raw_guarantee!r}"
            ) from None

        prefix = _get(options, "transactionalIdPrefix")
        if prefix is None:
            prefix = DEFAULT_PREFIX
        if not _PREFIX_RE.match(prefix):
            raise KafkaConfigError(
                f"option 'transactionalIdPrefix' must be 1-200 characters of letters, digits, "
                f"'.', '_' or '-', got {prefix!r}"
            )

        timeout = _positive_int(kafka, "transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS,
                                minimum=1000, shown="kafka.transaction.timeout.ms")
        kafka.pop("transaction.timeout.ms", None)

        # Spark's guide lists it for the sink, which never reads it (a headers column is always
        # written): checked, then ignored the same way.
        _flag(options, "includeHeaders")

        checkpoint = _get(options, "checkpointLocation")
        if streaming and guarantee is DeliveryGuarantee.EXACTLY_ONCE and not checkpoint:
            # Spark hands a Python sink the option only: a checkpoint it derives from
            # spark.sql.streaming.checkpointLocation and queryName never reaches the sink.
            raise KafkaConfigError(
                "the exactly-once sink keeps its commit log under the query's checkpoint: set "
                "option('checkpointLocation', ...) on writeStream (Spark does not pass the "
                "spark.sql.streaming.checkpointLocation setting to a Python data source)"
            )

        _check_writer_mode(options)
        return cls(
            kafka=kafka,
            topic=topic.strip() if topic else None,
            guarantee=guarantee,
            transactional_id_prefix=prefix,
            transaction_timeout_ms=timeout,
            checkpoint_location=checkpoint,
            commit_timeout_ms=_positive_int(options, "commitTimeoutMs", 120_000, minimum=1000,
                                            maximum=MAX_TIMEOUT_MS),
            commit_parallelism=_positive_int(options, "commitParallelism", 8),
            producer=_parse_producer(options, kafka),
            assume_partition_verification=_flag(options, "assumeTransactionPartitionVerification"),
            s3=(S3Settings.from_options(options)
                if (checkpoint and is_s3(checkpoint)) or any(
                    _get(options, name) is not None for name in S3_OPTIONS) else None),
            formats=parse_format_options({str(k).lower(): str(v) for k, v in options.items()}),
        )


def _check_writer_mode(options: Mapping[str, str]) -> None:
    """The writer has FAILFAST only: a row that does not fit its schema cannot be written as a
    null (as PERMISSIVE reads one) without losing the row, so any other mode is refused at start."""
    raw = _get(options, "mode")
    if raw is not None and raw.strip().upper() != "FAILFAST":
        raise KafkaConfigError(
            f"option 'mode' is {raw!r}, but the writer has FAILFAST only: a key or value that "
            "does not fit its schema would be lost if written as null (or skipped), so it fails "
            "the task instead; drop the option (or set FAILFAST), and filter or fix such rows "
            "upstream (for example write them to another topic as binary)")


def _flag(options: Mapping[str, str], name: str) -> bool:
    """An option that is ``true`` or ``false`` (the default)."""
    raw = _get(options, name)
    if raw is None or raw.strip().lower() == "false":
        return False
    if raw.strip().lower() == "true":
        return True
    raise KafkaConfigError(f"option '{name}' must be true or false, got {raw!r}")


PRODUCERS = ("auto", "txkafka", "librdkafka")

# kafka.* settings txkafka's own producer applies, besides the connection's
# (client.config.wire_connection_key, as for the reader's own fetch and the driver's commit
# client). Every other librdkafka setting is refused with producer=txkafka rather than dropped
# (and makes producer=auto write with librdkafka).
WIRE_PRODUCER_KEYS = frozenset({
    "compression.type", "compression.codec", "compression.level",
    "batch.size", "message.max.bytes", "message.timeout.ms", "delivery.timeout.ms",
    "request.timeout.ms", "topic.metadata.propagation.max.ms",
    "acks", "request.required.acks",  # 'all' only, checked above
})

# librdkafka settings whose one accepted value is what txkafka's own producer always does.
_WIRE_PRODUCER_FIXED: dict[str, tuple[tuple[str, ...], str]] = {
    "allow.auto.create.topics": (("false", "f", "0"), "it never creates topics"),
    "partitioner": (("murmur2_random",), "it places records as murmur2_random does (Java's "
                                         "placement: murmur2 of the key, null keys sticky)"),
}


def wire_producer_unsupported(conf: Mapping[str, str]) -> str | None:
    """Why txkafka's own producer cannot apply this client config (the setting named), or None."""
    from ..client.config import wire_connection_key, wire_unsupported

    for key in sorted(conf):
        if key in WIRE_PRODUCER_KEYS or wire_connection_key(key):
            continue
        if key in _WIRE_PRODUCER_FIXED:
            values, what = _WIRE_PRODUCER_FIXED[key]
            if str(conf[key]).strip().lower() in values:
                continue
            return (f"kafka.{key}={conf[key]!r} is set: txkafka's own producer does not apply it "
                    f"({what})")
        return (f"kafka.{key} is set: txkafka's own producer does not apply it (it sends a "
                "partition's batch when it is full, kafka.batch.size, or at the task's end, with "
                "its own connections and retries)")
    codec = str(conf.get("compression.type", conf.get("compression.codec", ""))).strip().lower()
    level = str(conf.get("compression.level", "-1")).strip()
    if codec == "lz4" and level.lstrip("-").isdigit() and int(level) >= 3:
        # librdkafka's levels 3-12 are LZ4HC; txkafka's LZ4 (independent blocks, as Kafka's Java
        # reader needs) has the fast compressor only, librdkafka's -1 to 2.
        return (f"kafka.compression.level={level} is set with lz4: txkafka's own producer "
                "compresses LZ4 at librdkafka's default level only (-1 to 2, not LZ4HC)")
    return wire_unsupported({k: v for k, v in conf.items()
                             if k not in ("client.rack", "check.crcs")})


_AUTO_LOGGED: set[str] = set()


def _parse_producer(options: Mapping[str, str], kafka: Mapping[str, str]) -> str:
    """``producer``: ``auto`` (default: ``txkafka`` unless a kafka.* setting needs librdkafka's
    producer), ``txkafka`` (Arrow columns encoded into record batches and sent over txkafka's own
    connections) or ``librdkafka`` (confluent-kafka's producer). Returns the producer the tasks
    use: ``librdkafka`` or ``txkafka``, decided once on the driver."""
    choice = one_of("producer", _get(options, "producer") or "auto", PRODUCERS)
    if choice == "librdkafka":
        return choice
    why = wire_producer_unsupported(kafka)
    if choice == "txkafka":
        if why is not None:
            raise KafkaConfigError(
                f"option 'producer' is 'txkafka', but {why}; drop that setting, or set producer "
                "to 'librdkafka', whose producer applies it ('auto' picks it for such "
                "settings)")
        return choice
    if why is None:
        why = _login_unsupported(kafka)
    if why is None:
        return "txkafka"
    if why not in _AUTO_LOGGED:  # once per process: the driver plans every batch with this
        _AUTO_LOGGED.add(why)
        log.info("producer=auto writes with librdkafka: %s", why)
    return "librdkafka"


def _login_unsupported(kafka: Mapping[str, str]) -> str | None:
    """Why txkafka's connections cannot log in with these settings (an OAUTHBEARER token source
    they lack, ...), or None. The exactly-once sink's commit client refuses them at start anyway;
    an at-least-once sink then writes with librdkafka."""
    from ..client.connection import SecurityConfig

    try:
        SecurityConfig.from_kafka_config(kafka)
    except KafkaConfigError as e:
        return str(e)
    return None
