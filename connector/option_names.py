"""Every option key the reader and the writer accept; any other key fails when the query starts.

Why: Spark hands a data source every ``.option(...)`` it was given, and a key nobody reads is
dropped without a word. A typo (``startingOffset``) then changes what a query reads (a new stream
starts at ``latest`` and skips the topic's records) instead of failing. So each side lists the
keys it knows, and ``check_option_names`` refuses the rest, naming the closest known option.

Keys are compared lower-cased: Spark passes them lower-cased (its ``CaseInsensitiveDict``), so a
message can only show a key as Spark passed it.

What pyspark 4.3 hands a Python data source besides the user's ``.option(...)`` keys (printed
from a real session for read, readStream, write and writeStream, with and without catalog tables):
``checkpointLocation`` and ``queryName`` for a stream's writer; ``path`` (``paths`` for several)
only when the user calls ``load(path)``, ``save(path)`` or ``start(path)``; nothing else (a
catalog table's OPTIONS are not passed at all).
"""

from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .errors import KafkaConfigError

log = logging.getLogger("txkafka.options")

# The key and value formats' options (connector/serde/options.py parses them): the registry
# client's settings under the Confluent clients' names, with their prefix.
REGISTRY_PREFIX = "schema.registry."

# The Confluent Python client's settings (SchemaRegistryClient's conf keys), with our prefix.
REGISTRY_SETTINGS: tuple[str, ...] = (
    "url", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "basic.auth.credentials.source", "basic.auth.user.info",
    "bearer.auth.credentials.source", "bearer.auth.token", "bearer.auth.logical.cluster",
    "bearer.auth.identity.pool.id", "bearer.auth.client.id", "bearer.auth.client.secret",
    "bearer.auth.scope", "bearer.auth.issuer.endpoint.url",
    "proxy", "timeout", "max.retries", "retries.wait.ms", "retries.max.wait.ms",
)
_NUMERIC_SETTINGS = ("timeout", "max.retries", "retries.wait.ms", "retries.max.wait.ms")
_PER_COLUMN = ("Format", "SchemaId", "Subject", "SchemaVersion", "RecordName", "RecordNamespace",
               "Message")
_SHARED = ("mode", "auto.register.schemas", "use.latest.version")

FORMAT_OPTIONS: tuple[str, ...] = (
    *(f"{side}{name}" for side in ("key", "value") for name in _PER_COLUMN),
    *(f"{side}.subject.name.strategy" for side in ("key", "value")),
    *_SHARED,
    *(REGISTRY_PREFIX + s for s in REGISTRY_SETTINGS),
)
"""Every format option's documented name (reader and writer alike)."""

# The prefix of the options passed to the Kafka clients (without it).
KAFKA_PREFIX = "kafka."

IGNORE_UNKNOWN_OPTIONS = "ignoreUnknownOptions"

# Both sides: the escape hatch itself, and the one kafka.* key every query needs (so that
# "bootstrap.servers" or "kafka_bootstrap_servers" gets a suggestion; other kafka.* keys are
# librdkafka's to check).
_COMMON = (IGNORE_UNKNOWN_OPTIONS, "kafka.bootstrap.servers")

READER_OPTIONS: tuple[str, ...] = (
    "subscribe", "subscribePattern", "assign",
    "startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp",
    "failOnDataLoss", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "minPartitions", "maxRecordsPerPartition", "includeHeaders", "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
    "commitOffsetsToGroup", "fetcher", "savepoint", "savepointSource",
    *FORMAT_OPTIONS,
)
"""The reader's own options and the Spark Kafka source's names it honours."""

WRITER_OPTIONS: tuple[str, ...] = (
    "topic", "checkpointLocation", "deliveryGuarantee", "transactionalIdPrefix",
    "commitTimeoutMs", "commitParallelism", "producer", "assumeTransactionPartitionVerification",
    "includeHeaders",
    # Hadoop's names for an S3 checkpoint's endpoint and credentials (connector/checkpoint/
    # object_store.py owns them)
    "fs.s3a.endpoint", "fs.s3a.endpoint.region", "fs.s3a.access.key", "fs.s3a.secret.key",
    "fs.s3a.session.token", "fs.s3a.path.style.access",
    *FORMAT_OPTIONS,
)
"""The writer's own options and the Spark Kafka sink's names it honours."""

# Spark adds a stream's queryName(...) to its writer's options; it names the query, not the sink.
SPARK_WRITER_KEYS: tuple[str, ...] = ("queryName",)

# load(path)/save(path)/start(path): Spark sets these only from the user's call, and txkafka has
# no path. Ignoring them could change what a query writes (save("out") on rows with a topic
# column would write to the column's topics), so they are refused, with what to do instead.
_PATH_KEYS = ("path", "paths")
_PATH_HINTS = {
    "reader": "the reader reads the topics named by 'subscribe', 'subscribePattern' or 'assign'; "
              "call load() without a path",
    "writer": "the writer writes to the 'topic' option or the 'topic' column; call save() or "
              "start() without a path and set option(\"topic\", ...)",
}

# What to do instead, when an option of one side is given to the other.
_OTHER_SIDE_HINTS: dict[tuple[str, str], str] = {
    ("reader", "topic"): "the reader reads the topics named by 'subscribe', 'subscribePattern' "
                         "or 'assign'",
    ("reader", "checkpointlocation"): "set it on the writer (df.writeStream.option("
                                      "\"checkpointLocation\", ...)); the reader's offsets live "
                                      "in that query's checkpoint",
    ("reader", "queryname"): "name the query on the writer (df.writeStream.queryName(...))",
    ("writer", "subscribe"): "the writer writes to the 'topic' option or the 'topic' column",
    ("writer", "subscribepattern"): "the writer writes to the 'topic' option or the 'topic' "
                                    "column",
    ("writer", "assign"): "the writer writes to the 'topic' option or the 'topic' column; a "
                          "'partition' column chooses partitions",
}

_API = {"reader": "spark.read/spark.readStream", "writer": "df.write/df.writeStream"}


@dataclass(frozen=True)
class OptionSpace:
    """The keys one side (``reader`` or ``writer``) accepts, by their documented names."""

    side: str
    options: tuple[str, ...]
    spark_keys: tuple[str, ...] = ()

    def documented_name(self, key: str) -> str:
        """The documented spelling of a key: 'startingoffsets' -> 'startingOffsets'."""
        for name in (*self.options, *_COMMON, *self.spark_keys):
            if name.lower() == key.lower():
                return name
        return key

    def accepts(self, key: str) -> bool:
        lkey = key.lower()
        return lkey.startswith(KAFKA_PREFIX) or lkey in {
            n.lower() for n in (*self.options, *_COMMON, *self.spark_keys)}

    def closest(self, key: str) -> str | None:
        """The documented option nearest to a key, if one is near enough."""
        names = {n.lower(): n for n in (*self.options, *_COMMON)}
        match = difflib.get_close_matches(key.lower(), list(names), n=1, cutoff=0.7)
        return names[match[0]] if match else None


READER = OptionSpace("reader", READER_OPTIONS)
WRITER = OptionSpace("writer", WRITER_OPTIONS, SPARK_WRITER_KEYS)


def _ignore_list(options: Mapping[str, str]) -> set[str]:
    raw = options.get(IGNORE_UNKNOWN_OPTIONS.lower())
    keys = {k.strip().lower() for k in (raw or "").split(",") if k.strip()}
    kafka_keys = sorted(k for k in keys if k.startswith(KAFKA_PREFIX))
    if kafka_keys:
        raise KafkaConfigError(
            f"option '{IGNORE_UNKNOWN_OPTIONS}' lists '{kafka_keys[0]}': kafka.* keys go to the "
            "Kafka client, which checks them itself and cannot be told to skip one; remove the "
            "key from the list")
    return keys


def _suggestion(key: str, space: OptionSpace, other: OptionSpace) -> str | None:
    """What the user likely meant by an unknown key, if anything is near."""
    near = space.closest(key)
    if near is not None:
        return f"did you mean '{near}'?"
    near = other.closest(key)
    if near is not None:
        return f"did you mean '{near}'? That is an option of the {other.side}"
    if "." in key:
        # A Kafka client setting given without its prefix ("linger.ms") is the likely mistake.
        return f"a Kafka client setting takes the prefix 'kafka.': 'kafka.{key}'"
    return None


def _unknown_text(keys: list[str], space: OptionSpace, other: OptionSpace) -> str:
    if len(keys) == 1:
        hint = _suggestion(keys[0], space, other)
        return f"unknown option '{keys[0]}'" + (f"; {hint}" if hint else "")
    parts = []
    for key in keys:
        hint = _suggestion(key, space, other)
        parts.append(f"'{key}'" + (f" ({hint})" if hint else ""))
    return "unknown options " + ", ".join(parts)


def _misplaced_text(key: str, space: OptionSpace, other: OptionSpace) -> str:
    hint = _OTHER_SIDE_HINTS.get((space.side, key.lower()),
                                 f"set it on the {other.side} ({_API[other.side]}) or remove it")
    return (f"option '{other.documented_name(key)}' is an option of the txkafka {other.side}, "
            f"not of the {space.side} ({_API[space.side]}), which would ignore it: {hint}")


def _path_text(key: str, space: OptionSpace) -> str:
    return (f"option '{key}' (set by a path given to load(), save() or start()) has no meaning "
            f"for txkafka, which would ignore it: {_PATH_HINTS[space.side]}")


def one_of(option: str, raw: str, allowed: Sequence[str]) -> str:
    """The value of a closed-choice option, lower-cased; anything else fails naming the choices."""
    choice = raw.strip().lower()
    if choice not in allowed:
        raise KafkaConfigError(
            f"option {option!r} must be one of {', '.join(allowed)}, got {raw!r}")
    return choice


_INTEGER = re.compile(r"[+-]?[0-9]+")
LONG_MAX = 2**63 - 1
# The longest wait an option may set, in ms: Java's int, as Kafka's own timeouts. Python's waits
# (locks, sockets, sleep) refuse more than about 292 years with a bare OverflowError.
MAX_TIMEOUT_MS = 2**31 - 1


def integer(option: str, raw: str, *, minimum: int | None = None,
            maximum: int = LONG_MAX) -> int:
    """An integer option's value, for the reader and the writer alike: an optional sign and
    digits within a long (Java's Long.parseLong, around which spaces are allowed); an empty value,
    ``1_000`` or ``1e3`` fails naming the option and what it takes (Python's int() would take
    ``1_000``). ``maximum``: MAX_TIMEOUT_MS for a timeout."""
    at_least = f" >= {minimum}" if minimum is not None else ""
    text = raw.strip()
    if not _INTEGER.fullmatch(text):
        raise KafkaConfigError(
            f"option {option!r} must be an integer{at_least} (digits, no separators), "
            f"got {raw!r}")
    value = int(text)
    if minimum is None:
        minimum = -LONG_MAX - 1
    if value < minimum:
        raise KafkaConfigError(f"option {option!r} must be >= {minimum}, got {value}")
    if value > maximum:
        unit = " (ms: about 24.8 days)" if maximum == MAX_TIMEOUT_MS else ""
        raise KafkaConfigError(f"option {option!r} must be at most {maximum}{unit}, got {value}")
    return value


def check_option_names(options: Mapping[str, Any], space: OptionSpace) -> None:
    """Raise KafkaConfigError for any key ``space`` does not accept, unless the user listed it in
    ``ignoreUnknownOptions``; an option of the other side and a path get their own messages.

    ``options`` may be Spark's case-insensitive mapping (lower-case keys) or a plain dict (keys
    shown as given); ``None`` values count as unset, as in the parsers.
    """
    given = [(str(k), v) for k, v in options.items() if v is not None]
    shown = {k.lower(): k for k, _ in given}
    ignore = _ignore_list({k.lower(): str(v) for k, v in given})
    other = WRITER if space is READER else READER
    problems: list[str] = []
    unknown: list[str] = []
    ignored: list[str] = []
    for lkey in sorted(shown):
        key = shown[lkey]
        if space.accepts(lkey):
            continue
        if lkey in ignore:
            ignored.append(key)
        elif lkey in _PATH_KEYS:
            problems.append(_path_text(key, space))
        elif other.accepts(lkey):
            problems.append(_misplaced_text(key, space, other))
        else:
            unknown.append(key)
    if unknown:
        problems.append(_unknown_text(unknown, space, other))
    if problems:
        text = "; ".join(problems)
        raise KafkaConfigError(
            f"{text}{'' if text.endswith('?') else '.'} The txkafka {space.side} refuses "
            "options it does not use, so that a mistyped name never changes what a query reads "
            "or writes. Option names are case-insensitive. To ignore a key on purpose (an option "
            "of a newer txkafka, or one options map shared by reader and writer), list it in "
            f"option(\"{IGNORE_UNKNOWN_OPTIONS}\", \"key1,key2\")")
    if ignored:
        log.warning("txkafka %s: ignoring option(s) %s, listed in %s", space.side,
                    ", ".join(ignored), IGNORE_UNKNOWN_OPTIONS)
