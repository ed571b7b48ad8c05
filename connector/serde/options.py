"""The key and value format options, parsed once into a typed, picklable config.

Names: ``keyFormat``/``valueFormat`` and the pinned schema (``valueSchemaId``, ``valueSubject``,
``valueSchemaVersion``) in the camelCase of txkafka's and Spark's source options; ``mode`` as
Spark's ``from_avro``; the registry client's settings and the serializer's behaviour under the
Confluent clients' own names (``schema.registry.*``, ``auto.register.schemas``,
``use.latest.version``, ``value.subject.name.strategy``), so a Confluent user's config carries over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from ..errors import KafkaConfigError
from ..option_names import (
    _NUMERIC_SETTINGS,
    _PER_COLUMN,
    _SHARED,
    FORMAT_OPTIONS,
    REGISTRY_PREFIX,
    REGISTRY_SETTINGS,
)

FORMATS = ("avro", "protobuf", "json-schema")
MODES = ("FAILFAST", "PERMISSIVE")
STRATEGIES = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")


@dataclass(frozen=True)
class RegistryConfig:
    """``schema.registry.url`` and the client settings; secrets never shown by ``repr``."""

    url: str
    settings: tuple[tuple[str, str], ...] = ()  # Confluent client names, without the prefix

    def client_conf(self) -> dict:
        conf: dict = {"url": self.url}
        for k, v in self.settings:
            conf[k] = int(v) if k in _NUMERIC_SETTINGS else v
        return conf

    def __repr__(self) -> str:
        from ..secrets_redaction import redact_uri

        return f"RegistryConfig(url={redact_uri(self.url)!r}, settings={[k for k, _ in self.settings]})"


@dataclass(frozen=True)
class ColumnFormat:
    """How one column (``key`` or ``value``) is framed and which schema it uses."""

    column: str                     # "key" or "value"
    format: str                     # one of FORMATS
    schema_id: Optional[int] = None
    subject: Optional[str] = None   # explicit subject; else from the strategy
    version: Optional[int] = None   # None: the subject's latest
    strategy: str = "TopicNameStrategy"
    record_name: str = "topLevelRecord"  # a schema derived from the DataFrame: its record's name
    record_namespace: str = ""
    message: Optional[str] = None   # Protobuf: the message type of the schema to use

    @property
    def option_prefix(self) -> str:
        return self.column

    def subject_for(self, topic: Optional[str], record_fullname: Optional[str]) -> str:
        """The subject by the strategy, as the Confluent serializers name it."""
        if self.subject:
            return self.subject
        if self.strategy == "TopicNameStrategy":
            if not topic:
                raise KafkaConfigError(
                    f"{self.column}Format: TopicNameStrategy names the subject after the topic; "
                    f"give one topic, or the subject in option '{self.column}Subject'")
            return f"{topic}-{self.column}"
        if not record_fullname:
            raise KafkaConfigError(
                f"{self.column}.subject.name.strategy {self.strategy} names the subject after the "
                f"record; give the subject in option '{self.column}Subject' or a pinned "
                f"'{self.column}SchemaId'")
        if self.strategy == "RecordNameStrategy":
            return record_fullname
        if not topic:
            raise KafkaConfigError(
                f"TopicRecordNameStrategy needs one topic; give option '{self.column}Subject'")
        return f"{topic}-{record_fullname}"


@dataclass(frozen=True)
class FormatOptions:
    """The formats of a query's key and value; None fields are plain binary, as without formats."""

    key: Optional[ColumnFormat]
    value: Optional[ColumnFormat]
    registry: RegistryConfig
    mode: str = "FAILFAST"
    auto_register: bool = False
    use_latest_version: bool = True

    @property
    def permissive(self) -> bool:
        return self.mode == "PERMISSIVE"

    def columns(self) -> list[ColumnFormat]:
        return [c for c in (self.key, self.value) if c is not None]


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    v = raw.strip().lower()
    if v not in ("true", "false"):
        raise KafkaConfigError(f"option '{key}' must be true or false, got {raw!r}")
    return v == "true"


def _int(opts: Mapping[str, str], key: str, minimum: int) -> Optional[int]:
    raw = opts.get(key.lower())
    if raw is None:
        return None
    try:
        v = int(raw.strip())
    except ValueError:
        raise KafkaConfigError(f"option '{key}' must be an integer, got {raw!r}") from None
    if v < minimum:
        raise KafkaConfigError(f"option '{key}' must be at least {minimum}, got {v}")
    return v


def _choice(opts: Mapping[str, str], key: str, choices: tuple[str, ...], default: str) -> str:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    for c in choices:
        if c.lower() == raw.strip().lower():
            return c
    raise KafkaConfigError(f"option '{key}' must be one of {', '.join(choices)}, got {raw!r}")


def _column(opts: Mapping[str, str], side: str) -> Optional[ColumnFormat]:
    fmt_key = f"{side}Format"
    if fmt_key.lower() not in opts:
        given = [f"{side}{n}" for n in _PER_COLUMN[1:] if f"{side}{n}".lower() in opts]
        if given:
            raise KafkaConfigError(f"option '{given[0]}' needs option '{fmt_key}' (avro, "
                                   "protobuf or json-schema)")
        return None
    fmt = _choice(opts, fmt_key, FORMATS, "")
    version_raw = opts.get(f"{side}schemaversion")
    version = None
    if version_raw is not None and version_raw.strip().lower() != "latest":
        version = _int(opts, f"{side}SchemaVersion", 1)
    schema_id = _int(opts, f"{side}SchemaId", 0)
    if schema_id is not None and (version is not None or f"{side}subject" in opts):
        raise KafkaConfigError(f"option '{side}SchemaId' pins the schema by id; drop "
                               f"'{side}Subject' and '{side}SchemaVersion'")
    subject = opts.get(f"{side}subject")
    if subject is not None and not subject.strip():
        raise KafkaConfigError(f"option '{side}Subject' is empty; give a subject name")
    return ColumnFormat(
        column=side, format=fmt, schema_id=schema_id,
        subject=subject.strip() if subject else None, version=version,
        strategy=_choice(opts, f"{side}.subject.name.strategy", STRATEGIES, "TopicNameStrategy"),
        record_name=opts.get(f"{side}recordname", "topLevelRecord"),
        record_namespace=opts.get(f"{side}recordnamespace", ""),
        message=opts.get(f"{side}message"))


def parse_format_options(opts: Mapping[str, str]) -> Optional[FormatOptions]:
    """The format options of a lower-cased option map; None when no column has a format."""
    key, value = _column(opts, "key"), _column(opts, "value")
    registry_given = sorted(k for k in opts if k.startswith(REGISTRY_PREFIX))
    if key is None and value is None:
        shared = [k for k in (*_SHARED, *registry_given) if k.lower() in opts]
        if shared:
            raise KafkaConfigError(f"option '{shared[0]}' applies to keyFormat/valueFormat, and "
                                   "neither is set; set one, or drop the option")
        return None
    url = opts.get(REGISTRY_PREFIX + "url", "").strip()
    if not url:
        raise KafkaConfigError("keyFormat/valueFormat need option 'schema.registry.url' (the "
                               "Schema Registry's root URL, for example http://host:8081)")
    known = {REGISTRY_PREFIX + s for s in REGISTRY_SETTINGS}
    settings = []
    for k in registry_given:
        if k not in known:
            raise KafkaConfigError(f"option '{k}' is not a Schema Registry client setting; known: "
                                   + ", ".join(sorted(known)))
        if k != REGISTRY_PREFIX + "url":
            name = k[len(REGISTRY_PREFIX):]
            if name in _NUMERIC_SETTINGS:
                _int(opts, k, 0)
            settings.append((name, opts[k]))
    auto_register = _bool(opts, "auto.register.schemas", False)
    use_latest = _bool(opts, "use.latest.version", not auto_register)
    if auto_register and use_latest:
        raise KafkaConfigError("options 'auto.register.schemas' and 'use.latest.version' are both "
                               "true; choose one (register the DataFrame's schema, or write with "
                               "the subject's latest)")
    return FormatOptions(key=key, value=value, registry=RegistryConfig(url, tuple(settings)),
                         mode=_choice(opts, "mode", MODES, "FAILFAST"),
                         auto_register=auto_register, use_latest_version=use_latest)
