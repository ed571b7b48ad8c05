"""The reader's options, parsed once into a typed, validated, picklable config.

Why: Spark's Kafka source validates its options when the query starts; txkafka does the same so a
typo fails at ``load()``/``start()`` with the option named, never in an executor an hour later. The
option names and defaults are Spark's (``format("kafka")`` -> ``format("txkafka")`` is a one-word
change); the parsed config travels to executors inside each input partition, so it holds only plain,
picklable values and never a client.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Union

from ..errors import KafkaConfigError
from ..client.config import (
    check_client_config,
    describe_config,
    kafka_client_config,
    wire_connection_key,
    wire_unsupported,
)
from ..serde.options import FormatOptions, parse_format_options
from ..option_names import LONG_MAX, MAX_TIMEOUT_MS, READER, check_option_names, integer, one_of

log = logging.getLogger("txkafka.reader")

TopicPartitionKey = tuple[str, int]
"""A topic partition as ``(topic, partition)``: hashable, picklable, sorts like Spark's offsets."""

EARLIEST = -2
LATEST = -1

# Spark's defaults, as its code has them (its guide says 10 ms for the retry interval; every
# offset reader of its Kafka source uses 1000).
DEFAULT_GROUP_ID_PREFIX = "spark-kafka-source"          # streaming queries
DEFAULT_BATCH_GROUP_ID_PREFIX = "spark-kafka-relation"  # spark.read
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_FETCH_OFFSET_NUM_RETRIES = 3
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 1000
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
# librdkafka waits fetch.queue.backoff.ms (default 1000) before fetching more for a partition
# whose queue is full; see SourceOptions.consumer_config. Shared by every bulk reader txkafka runs.
FETCH_QUEUE_BACKOFF_MS = 10

# kafka.* keys the reader sets itself, with the reason shown to a user who tries to set them.
READER_OWNED_KEYS: dict[str, str] = {
    "auto.offset.reset": "set the source option startingOffsets instead; txkafka keeps offsets in "
                         "Spark's checkpoint and never resets them silently",
    "enable.auto.commit": "txkafka never commits offsets for recovery (they live in Spark's "
                          "checkpoint); set commitOffsetsToGroup=true to publish them for lag tools",
    # consumer_config() sets these two: a user's value would be overwritten without a word.
    "enable.partition.eof": "txkafka ends a range that stops on a transaction marker at partition "
                            "EOF, so the executors' consumers always report it",
    "enable.auto.offset.store": "txkafka never stores or commits consumer offsets for recovery "
                                "(they live in Spark's checkpoint)",
}

_STRATEGY_OPTIONS = ("subscribe", "subscribepattern", "assign")
_STREAM_ONLY = ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay")
_BATCH_ONLY = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
_TIME_UNITS_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                  "d": 86_400_000}


# ---- consumer strategies -------------------------------------------------------------------


@dataclass(frozen=True)
class Subscribe:
    """``subscribe``: a fixed list of topics; partitions (and topics created later) found each trigger."""

    topics: tuple[str, ...]


# Kafka's internal topics; a pattern subscription never matches them (like Java's
# exclude.internal.topics=true).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state",
                             "__cluster_metadata"})


@dataclass(frozen=True)
class SubscribePattern:
    """``subscribePattern``: every topic the regex matches, re-evaluated each trigger."""

    pattern: str

    def matches(self, topic: str) -> bool:
        """Spark's rule: a match anywhere in the name (``orders`` reads ``orders-eu``; anchor it,
        ``^orders$``, for one topic); never one of Kafka's internal topics."""
        return topic not in INTERNAL_TOPICS and re.search(self.pattern, topic) is not None


@dataclass(frozen=True)
class Assign:
    """``assign``: exactly these topic partitions."""

    partitions: tuple[TopicPartitionKey, ...]


ConsumerStrategy = Union[Subscribe, SubscribePattern, Assign]


# ---- offset specifications -------------------------------------------------------------------


@dataclass(frozen=True)
class EarliestOffsets:
    """Start (or end) at each partition's log start offset."""


@dataclass(frozen=True)
class LatestOffsets:
    """Start (or end) at each partition's latest offset (the LSO under read_committed)."""


@dataclass(frozen=True)
class SpecificOffsets:
    """Offsets per partition from JSON; -2 means earliest, -1 latest."""

    offsets: tuple[tuple[TopicPartitionKey, int], ...]

    def as_dict(self) -> dict[TopicPartitionKey, int]:
        return dict(self.offsets)


@dataclass(frozen=True)
class GlobalTimestamp:
    """``startingTimestamp``/``endingTimestamp``: one timestamp (ms) for every partition."""

    timestamp_ms: int


@dataclass(frozen=True)
class PartitionTimestamps:
    """``startingOffsetsByTimestamp``/``endingOffsetsByTimestamp``: a timestamp (ms) per partition."""

    timestamps: tuple[tuple[TopicPartitionKey, int], ...]

    def as_dict(self) -> dict[TopicPartitionKey, int]:
        return dict(self.timestamps)


OffsetSpec = Union[EarliestOffsets, LatestOffsets, SpecificOffsets, GlobalTimestamp,
                   PartitionTimestamps]


def at_log_start(spec: OffsetSpec,
                 tps: Iterable[TopicPartitionKey]) -> frozenset[TopicPartitionKey]:
    """The partitions of ``tps`` that ``spec`` starts at their log start ("earliest", -2 in JSON):
    a batch read binds those when its task runs (``FetchTask.earliest_start``)."""
    if isinstance(spec, EarliestOffsets):
        return frozenset(tps)
    if isinstance(spec, SpecificOffsets):
        wanted = spec.as_dict()
        return frozenset(tp for tp in tps if wanted.get(tp) == EARLIEST)
    return frozenset()


@dataclass(frozen=True)
class SourceOptions:
    """Everything the reader needs, validated. ``client_config`` is librdkafka's config (sorted pairs).

    ``repr`` redacts secrets: the config travels in input partitions and may end up in logs.
    """

    client_config: tuple[tuple[str, str], ...]
    strategy: ConsumerStrategy
    starting: OffsetSpec
    ending: OffsetSpec
    on_no_matching_starting_timestamp: str = "error"
    # startingOffsets, startingOffsetsByTimestamp or startingTimestamp was set (not the default)
    starting_given: bool = False
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: Optional[int] = None
    min_offsets_per_trigger: Optional[int] = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: Optional[int] = None
    max_records_per_partition: Optional[int] = None
    include_headers: bool = False
    group_id: str = ""
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_num_retries: int = DEFAULT_FETCH_OFFSET_NUM_RETRIES
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
    commit_offsets_to_group: bool = False
    streaming: bool = True
    fetcher: str = "librdkafka"  # resolved: "wire" (txkafka's own Fetch) or "librdkafka"
    savepoint: Optional[str] = None         # a savepoint file: where a new query starts
    savepoint_source: Optional[int] = None  # which source of the savepoint's query this one continues
    formats: Optional[FormatOptions] = None  # keyFormat/valueFormat; None: binary key and value

    @property
    def single_topic(self) -> Optional[str]:
        """The one topic the query reads, if it reads one (names TopicNameStrategy's subject)."""
        s = self.strategy
        topics = set(s.topics) if isinstance(s, Subscribe) else (
            {t for t, _ in s.partitions} if isinstance(s, Assign) else set())
        return next(iter(topics)) if len(topics) == 1 else None

    @property
    def client_conf(self) -> dict[str, str]:
        """librdkafka settings from the ``kafka.*`` options (a fresh dict each call)."""
        return dict(self.client_config)

    @property
    def isolation_level(self) -> str:
        """read_committed unless the user asked otherwise (librdkafka's default, unlike Java's)."""
        return self.client_conf.get("isolation.level", "read_committed")

    def consumer_config(self) -> dict[str, str]:
        """Config of the executors' consumers: assign-only, no commits, EOF events, no resets."""
        conf = self.client_conf
        conf.setdefault("isolation.level", "read_committed")
        # 8 MB per partition and fetch: fewer round trips to a remote broker (on loopback it makes
        # no difference). A pooled consumer prefetches at most 32 MB.
        if "fetch.message.max.bytes" not in conf:  # librdkafka's own name for the same setting
            conf.setdefault("max.partition.fetch.bytes", str(8 * 1024 * 1024))
        conf.setdefault("queued.max.messages.kbytes", "32768")
        # Once its queue holds queued.min.messages (100k), librdkafka postpones the partition's
        # next fetch by fetch.queue.backoff.ms, 1000 ms by default, however fast the queue is
        # drained: small records would idle a reader most of the time. 10 ms keeps fetching.
        conf.setdefault("fetch.queue.backoff.ms", str(FETCH_QUEUE_BACKOFF_MS))
        # A range that ends on a transaction marker finishes on partition EOF, which needs one
        # empty fetch at the log end: keep the broker's long-poll short.
        conf.setdefault("fetch.wait.max.ms", "100")
        conf.update({
            "group.id": self.group_id,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            # Never jump silently: an out-of-range start surfaces as an error we classify.
            "auto.offset.reset": "error",
        })
        return conf

    def __repr__(self) -> str:
        return (f"SourceOptions(strategy={self.strategy}, starting={self.starting}, "
                f"ending={self.ending}, streaming={self.streaming}, "
                f"client={describe_config(self.client_conf)})")


# ---- parsing helpers -------------------------------------------------------------------------


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in options.items():
        if v is None:
            continue
        out[str(k).lower()] = str(v)
    return out


def _opt_name(lname: str) -> str:
    """The documented (camelCase) name of an option, for error messages."""
    return READER.documented_name(lname)


def parse_bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise KafkaConfigError(f"option '{_opt_name(key)}' must be true or false, got {raw!r}")


def parse_long(opts: Mapping[str, str], key: str, *, minimum: int | None = None,
               maximum: int = LONG_MAX) -> Optional[int]:
    raw = opts.get(key)
    return None if raw is None else integer(_opt_name(key), raw, minimum=minimum, maximum=maximum)


def parse_time_ms(raw: str, option: str) -> int:
    """Spark's time strings: ``15m``, ``30s``, ``500ms``, ``2h``, ``1d``, ``100us`` (whole
    milliseconds, rounded down as Spark does); a bare number is ms."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", raw)
    unit = m.group(2).lower() if m else ""
    if not m or (unit and unit != "us" and unit not in _TIME_UNITS_MS):
        raise KafkaConfigError(
            f"option '{option}' must be a duration such as '15m', '30s' or '500ms', got {raw!r}")
    if unit == "us":
        return int(m.group(1)) // 1000
    return int(m.group(1)) * _TIME_UNITS_MS[unit or "ms"]


def _json(raw: str, option: str, example: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise KafkaConfigError(
            f"option '{option}' is not valid JSON ({e.msg} at position {e.pos}); "
            f"expected for example {example}") from None


def _partition_number(raw: Any, option: str, topic: str) -> int:
    if not re.fullmatch(r"\d+", str(raw).strip()):
        raise KafkaConfigError(
            f"option '{option}': partition {raw!r} of topic {topic!r} is not a partition number")
    return int(str(raw).strip())


def parse_partition_map(raw: str, option: str) -> dict[TopicPartitionKey, int]:
    """``{"topic": {"0": 23, "1": -2}}`` -> {(topic, 0): 23, (topic, 1): -2}."""
    example = '{"topicA": {"0": 23, "1": -2}, "topicB": {"0": -1}}'
    data = _json(raw, option, example)
    if not isinstance(data, dict) or not data:
        raise KafkaConfigError(
            f"option '{option}' must be a non-empty JSON object of topics, e.g. {example}")
    out: dict[TopicPartitionKey, int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise KafkaConfigError(
                f"option '{option}': the value of topic {topic!r} must be an object of "
                f"partition -> number, e.g. {example}")
        for p, value in parts.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise KafkaConfigError(
                    f"option '{option}': topic {topic!r} partition {p}: expected an integer, "
                    f"got {value!r}")
            out[(topic, _partition_number(p, option, topic))] = value
    return out


def parse_assign(raw: str) -> tuple[TopicPartitionKey, ...]:
    """``{"topicA": [0, 1], "topicB": [2, 4]}`` -> sorted (topic, partition) pairs."""
    example = '{"topicA": [0, 1], "topicB": [2, 4]}'
    data = _json(raw, "assign", example)
    if not isinstance(data, dict) or not data:
        raise KafkaConfigError(
            f"option 'assign' must be a non-empty JSON object of topic -> partitions, e.g. {example}")
    out: set[TopicPartitionKey] = set()
    for topic, parts in data.items():
        if not topic or not isinstance(parts, list) or not parts:
            raise KafkaConfigError(
                f"option 'assign': topic {topic!r} needs a non-empty list of partitions, "
                f"e.g. {example}")
        for p in parts:
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise KafkaConfigError(
                    f"option 'assign': topic {topic!r} has {p!r}, expected partition numbers")
            out.add((topic, p))
    return tuple(sorted(out))


def _parse_strategy(opts: Mapping[str, str]) -> ConsumerStrategy:
    given = [k for k in _STRATEGY_OPTIONS if k in opts]
    if len(given) != 1:
        names = ", ".join(_opt_name(k) for k in given) if given else "none"
        raise KafkaConfigError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be set "
            f"(got {names}); for example option(\"subscribe\", \"topic1,topic2\")")
    key = given[0]
    raw = opts[key]
    if key == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise KafkaConfigError(
                f"option 'subscribe' lists no topics (got {raw!r}); give a comma-separated list")
        return Subscribe(topics)
    if key == "subscribepattern":
        if not raw.strip():
            raise KafkaConfigError("option 'subscribePattern' is empty; give a regex such as 'events-.*'")
        try:
            re.compile(raw)
        except re.error as e:
            raise KafkaConfigError(
                f"option 'subscribePattern' is not a valid regular expression: {e}") from None
        return SubscribePattern(raw.strip())  # as Spark: a pattern from a config file may be padded
    return Assign(parse_assign(raw))


def _parse_offsets_option(raw: str, option: str, *, starting: bool, streaming: bool) -> OffsetSpec:
    v = raw.strip()
    if v.lower() == "earliest":
        if not starting:
            raise KafkaConfigError(
                f"option '{option}' cannot be 'earliest' (an empty read); use 'latest' or JSON")
        return EarliestOffsets()
    if v.lower() == "latest":
        if starting and not streaming:
            raise KafkaConfigError(
                f"option '{option}' cannot be 'latest' for a batch query (it would read nothing); "
                "use 'earliest' or JSON offsets")
        return LatestOffsets()
    if not v.startswith("{"):
        raise KafkaConfigError(
            f"option '{option}' must be 'earliest', 'latest' or JSON such as "
            f"{{\"topicA\": {{\"0\": 23, \"1\": -2}}}}, got {raw!r}")
    offsets = parse_partition_map(v, option)
    for (topic, p), off in offsets.items():
        if off < EARLIEST:
            raise KafkaConfigError(
                f"option '{option}': topic {topic!r} partition {p} has offset {off}; offsets are "
                ">= 0, or -2 (earliest) / -1 (latest)")
        if starting and not streaming and off == LATEST:
            raise KafkaConfigError(
                f"option '{option}': topic {topic!r} partition {p} is -1 (latest), which a batch "
                "query cannot start from")
        if not starting and off == EARLIEST:
            raise KafkaConfigError(
                f"option '{option}': topic {topic!r} partition {p} is -2 (earliest), which cannot "
                "be an ending offset; use -1 (latest) or an offset")
    return SpecificOffsets(tuple(sorted(offsets.items())))


def _parse_offset_spec(opts: Mapping[str, str], prefix: str, *, streaming: bool,
                       default: OffsetSpec) -> OffsetSpec:
    """Spark's precedence: ``<prefix>Timestamp`` > ``<prefix>OffsetsByTimestamp`` > ``<prefix>Offsets``."""
    starting = prefix == "starting"
    ts_key, by_ts_key, off_key = f"{prefix}timestamp", f"{prefix}offsetsbytimestamp", f"{prefix}offsets"
    if ts_key in opts:
        ts = parse_long(opts, ts_key, minimum=0)
        assert ts is not None
        return GlobalTimestamp(ts)
    if by_ts_key in opts:
        ts_map = parse_partition_map(opts[by_ts_key], _opt_name(by_ts_key))
        for (topic, p), ts in ts_map.items():
            if ts < 0:
                raise KafkaConfigError(
                    f"option '{_opt_name(by_ts_key)}': topic {topic!r} partition {p} has timestamp "
                    f"{ts}; timestamps are milliseconds since the epoch (>= 0)")
        return PartitionTimestamps(tuple(sorted(ts_map.items())))
    if off_key in opts:
        return _parse_offsets_option(opts[off_key], _opt_name(off_key), starting=starting,
                                     streaming=streaming)
    return default


def validate_common(options: Mapping[str, Any]) -> dict[str, str]:
    """The checks that hold for batch and streaming alike, run at ``load()`` (before Spark knows
    which it is): strategy, kafka.* keys, offsets JSON, numbers. Returns the lower-cased map."""
    parsed = parse_source_options(options, streaming=None)
    # The consumer the executors will create: librdkafka checks some kafka.* combinations (fetch
    # sizes against each other) only then, so check them here, once, instead of in every task.
    check_client_config(parsed.consumer_config(), "consumer")
    return _lower(options)


def parse_source_options(options: Mapping[str, Any], *, streaming: Optional[bool]) -> SourceOptions:
    """Parse and validate the reader options of a streaming (``streaming=True``) or batch query;
    ``streaming=None`` skips the rules that depend on which (used at ``load()``)."""
    check_option_names(options, READER)
    opts = _lower(options)
    conf = kafka_client_config(opts, owned=READER_OWNED_KEYS)
    if "isolation.level" in conf:  # any case, as librdkafka and the other closed choices take it
        conf["isolation.level"] = one_of("kafka.isolation.level", conf["isolation.level"],
                                         ("read_committed", "read_uncommitted"))
    strategy = _parse_strategy(opts)

    if streaming:
        bad = [_opt_name(k) for k in _BATCH_ONLY if k in opts]
        if bad:
            raise KafkaConfigError(
                f"option '{bad[0]}' is for batch queries only; a streaming query runs until "
                "stopped (use Trigger.AvailableNow to stop at the data present at start)")
    elif streaming is False:
        ignored = [_opt_name(k) for k in (*_STREAM_ONLY, "commitoffsetstogroup") if k in opts]
        if ignored:
            log.warning("options %s apply to streaming queries only; a batch query ignores them",
                        ", ".join(ignored))
    # (At load(), validate offsets with the permissive streaming rules: batch rules come later.)
    lenient = streaming is not False
    starting = _parse_offset_spec(opts, "starting", streaming=lenient,
                                  default=LatestOffsets() if lenient else EarliestOffsets())
    ending = _parse_offset_spec(opts, "ending", streaming=lenient, default=LatestOffsets())

    strategy_raw = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy_raw not in ("error", "latest"):
        raise KafkaConfigError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {opts['startingoffsetsbytimestampstrategy']!r}")

    max_off = parse_long(opts, "maxoffsetspertrigger", minimum=1)
    min_off = parse_long(opts, "minoffsetspertrigger", minimum=1)
    if max_off is not None and min_off is not None and min_off > max_off:
        raise KafkaConfigError(
            f"option 'minOffsetsPerTrigger' ({min_off}) must not exceed 'maxOffsetsPerTrigger' "
            f"({max_off})")
    delay_ms = DEFAULT_MAX_TRIGGER_DELAY_MS
    if "maxtriggerdelay" in opts:
        delay_ms = parse_time_ms(opts["maxtriggerdelay"], "maxTriggerDelay")
    min_parts = parse_long(opts, "minpartitions", minimum=1)
    max_records = parse_long(opts, "maxrecordsperpartition", minimum=1)
    poll_ms = parse_long(opts, "kafkaconsumer.polltimeoutms", minimum=1)
    retries = parse_long(opts, "fetchoffset.numretries", minimum=1)
    interval = parse_long(opts, "fetchoffset.retryintervalms", minimum=0, maximum=MAX_TIMEOUT_MS)

    prefix = opts.get("groupidprefix", DEFAULT_BATCH_GROUP_ID_PREFIX if streaming is False
                      else DEFAULT_GROUP_ID_PREFIX)
    user_group = "kafka.group.id" in opts
    if user_group and not conf.get("group.id", "").strip():
        raise KafkaConfigError(
            "option 'kafka.group.id' is empty; give a group name, or drop the option to have one "
            "generated from groupIdPrefix")
    if user_group and "groupidprefix" in opts:
        log.warning("option 'groupIdPrefix' is ignored: 'kafka.group.id' names the group")
    group_id = conf.pop("group.id", None) or f"{prefix}-{uuid.uuid4()}"
    commit_to_group = parse_bool(opts, "commitoffsetstogroup", False)
    if commit_to_group and not user_group:
        raise KafkaConfigError(
            "option 'commitOffsetsToGroup' needs 'kafka.group.id': the group whose committed "
            "offsets lag tools should show (offsets are published for monitoring only)")

    fetcher = _parse_fetcher(opts, conf)
    savepoint, savepoint_source = _parse_savepoint(opts)

    return SourceOptions(
        client_config=tuple(sorted(conf.items())),
        strategy=strategy,
        starting=starting,
        starting_given=any(k in opts for k in ("startingoffsets", "startingoffsetsbytimestamp",
                                               "startingtimestamp")),
        ending=ending,
        on_no_matching_starting_timestamp=strategy_raw,
        fail_on_data_loss=parse_bool(opts, "failondataloss", True),
        max_offsets_per_trigger=max_off,
        min_offsets_per_trigger=min_off,
        max_trigger_delay_ms=delay_ms,
        min_partitions=min_parts,
        max_records_per_partition=max_records,
        include_headers=parse_bool(opts, "includeheaders", False),
        group_id=group_id,
        poll_timeout_ms=poll_ms if poll_ms is not None else DEFAULT_POLL_TIMEOUT_MS,
        fetch_offset_num_retries=retries if retries is not None else DEFAULT_FETCH_OFFSET_NUM_RETRIES,
        fetch_offset_retry_interval_ms=(interval if interval is not None
                                        else DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS),
        commit_offsets_to_group=commit_to_group,
        streaming=streaming is not False,
        fetcher=fetcher,
        savepoint=savepoint,
        savepoint_source=savepoint_source,
        formats=parse_format_options(opts),
    )


def _parse_savepoint(opts: Mapping[str, str]) -> tuple[Optional[str], Optional[int]]:
    """``savepoint`` (a file from ``txkafka savepoint create``) and ``savepointSource`` (the index
    of the old query's source this one continues). The file is read when a new query starts."""
    raw = opts.get("savepoint")
    source = parse_long(opts, "savepointsource", minimum=0)
    if raw is not None and not raw.strip():
        raise KafkaConfigError("option 'savepoint' is empty; give the path of a savepoint file "
                               "(txkafka savepoint create --out PATH)")
    if source is not None and raw is None:
        raise KafkaConfigError("option 'savepointSource' needs option 'savepoint' (the file whose "
                               "source it picks)")
    return (raw.strip() if raw is not None else None), source


FETCHERS = ("auto", "wire", "librdkafka")

# kafka.* settings the wire fetcher applies, besides the connection's
# (client.config.wire_connection_key, as for txkafka's own producer). Every other librdkafka
# setting makes fetcher=auto read with librdkafka and fetcher=wire fail, rather than being
# dropped on the executors.
WIRE_FETCHER_KEYS = frozenset({
    "isolation.level",
    "fetch.wait.max.ms", "fetch.min.bytes", "fetch.max.bytes",
    "max.partition.fetch.bytes", "fetch.message.max.bytes",
    # The group only names commitOffsetsToGroup's group (on the driver); fetches join no group.
    "group.id",
    # The driver's offset look-ups (the kafka.* table in docs/user-guide-reader.md): no fetch.
    "reconnect.backoff.ms", "socket.timeout.ms",
    # librdkafka's debug log (its clients: the driver's, a range handed over): turning it on must
    # not change the fetch path being debugged.
    "debug",
    # Java consumer settings a query carried over from Spark often has: a range read joins no group
    # and has no poll loop for them to bound (no effect with librdkafka's assigned consumer either).
    "max.poll.interval.ms", "max.poll.records",
})

# Settings consumer_config() puts in for librdkafka's consumer (which takes over a range the wire
# fetcher hands on): given with txkafka's own value, they change nothing.
_WIRE_FETCHER_FIXED = {
    "queued.max.messages.kbytes": "32768",
    "fetch.queue.backoff.ms": str(FETCH_QUEUE_BACKOFF_MS),
    "enable.auto.commit": "false", "enable.auto.offset.store": "false",
    "enable.partition.eof": "true", "auto.offset.reset": "error",
    "check.crcs": "false",  # the wire fetcher checks no CRCs (=true: see wire_unsupported)
}


def wire_fetcher_unsupported(conf: Mapping[str, str]) -> str | None:
    """Why the wire fetcher cannot apply this client config (the settings named), or None."""
    why = wire_unsupported(conf)  # the settings with a reason of their own first
    if why is not None:
        return why
    extra = [k for k in sorted(conf)
             if k not in WIRE_FETCHER_KEYS and not wire_connection_key(k)
             and str(conf[k]).strip().lower() != _WIRE_FETCHER_FIXED.get(k)]
    if extra:
        return (f"{', '.join('kafka.' + k for k in extra)} "
                f"{'is' if len(extra) == 1 else 'are'} set: txkafka's own fetch does not apply "
                f"{'it' if len(extra) == 1 else 'them'} (librdkafka's consumer does)")
    return None


_AUTO_LOGGED: set[str] = set()


def _parse_fetcher(opts: Mapping[str, str], conf: Mapping[str, str]) -> str:
    """``fetcher``: ``auto`` (default) reads with txkafka's own Fetch requests unless a kafka.*
    setting needs librdkafka (wire_fetcher_unsupported); ``wire`` insists; ``librdkafka`` reads
    through confluent-kafka's consumer."""
    choice = one_of("fetcher", opts.get("fetcher", "auto"), FETCHERS)
    if choice == "librdkafka":
        return choice
    why = wire_fetcher_unsupported(conf)
    if why is None:
        return "wire"
    if choice == "wire":
        raise KafkaConfigError(
            f"option 'fetcher' is 'wire', but {why}; drop that setting, or set fetcher to "
            "'librdkafka' ('auto' picks it for such settings)")
    if why not in _AUTO_LOGGED:  # once per process: the driver plans every batch with this
        _AUTO_LOGGED.add(why)
        log.info("fetcher=auto reads with librdkafka: %s", why)
    return "librdkafka"
