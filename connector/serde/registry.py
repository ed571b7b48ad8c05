"""The Schema Registry client: Confluent's ``SchemaRegistryClient`` behind bounded retries, clear
errors and caches that last a worker's life.

Why a wrapper: a schema id names one schema forever, so schemas by id (and by subject and
version) are cached per worker process, and a running query needs the registry only for ids it
has not seen. The client's own errors name neither the request in a user's terms nor, once
retries are spent, the registry; ours name both, with the URL's credentials cut off.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar

from ..errors import SchemaNotFoundError, SchemaRegistryError
from ..secrets_redaction import redact_text, redact_uri
from .options import RegistryConfig

log = logging.getLogger("txkafka.serde")

T = TypeVar("T")

# Transport failures retried by us (the client retries HTTP 5xx and 429 itself).
_ATTEMPTS = 3
_BACKOFF_S = 0.5

# Confluent's type names (what the registry stores) by our format names.
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}


@dataclass(frozen=True)
class RegisteredSchema:
    """One schema as the registry holds it; ``references`` maps import names to schema texts."""

    schema_id: int
    schema_type: str                 # AVRO, PROTOBUF or JSON
    text: str
    references: tuple[tuple[str, str], ...] = ()
    subject: Optional[str] = None
    version: Optional[int] = None


class Registry:
    """One registry's client and caches; :func:`registry_for` shares it within a process."""

    def __init__(self, config: RegistryConfig) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.config = config
        self.where = redact_uri(config.url)
        try:
            self._client = SchemaRegistryClient(config.client_conf())
        except (ValueError, TypeError) as e:
            raise SchemaRegistryError(
                f"Schema Registry client settings (schema.registry.*) for {self.where}: "
                f"{redact_text(str(e), dict(config.settings))}") from None
        self._by_id: dict[int, RegisteredSchema] = {}
        self._by_version: dict[tuple[str, int], RegisteredSchema] = {}
        self._registered_ids: dict[tuple[str, str, str], int] = {}
        self._raw_refs: dict[tuple[str, int], tuple] = {}  # (subject, version) -> its references
        self._lock = threading.Lock()

    # ---- calls -------------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        from confluent_kafka.schema_registry.error import SchemaRegistryError as ClientError

        last: Exception | None = None
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                return fn()
            except ClientError as e:
                if e.http_status_code is not None and 0 < e.http_status_code < 500:
                    kind = SchemaNotFoundError if e.http_status_code == 404 else \
                        SchemaRegistryError
                    raise kind(
                        f"Schema Registry at {self.where} refused {what}: "
                        f"{self._safe(e.error_message)} (HTTP {e.http_status_code}, error code "
                        f"{e.error_code})") from None
                last = e
            except Exception as e:  # noqa: BLE001 - the HTTP library's transport errors
                last = e
            if attempt < _ATTEMPTS:
                time.sleep(_BACKOFF_S * attempt)
        raise SchemaRegistryError(
            f"Schema Registry at {self.where} did not answer {what} after {_ATTEMPTS} attempts: "
            f"{type(last).__name__}: {self._safe(str(last))}; check schema.registry.url and that "
            "the registry is reachable from the driver and the executors") from None

    def _safe(self, text: str) -> str:
        text = redact_text(text, dict(self.config.settings))
        return text.replace(self.config.url, self.where)

    def _references(self, refs) -> tuple[tuple[str, str], ...]:
        """Every schema the references name, transitively, as (import name, text)."""
        out: dict[str, str] = {}
        todo = list(refs or ())
        while todo:
            ref = todo.pop()
            if ref.name in out:
                continue
            got = self.version(ref.subject, ref.version)
            out[ref.name] = got.text
            todo.extend(self._raw_refs.get((ref.subject, ref.version), ()))
        return tuple(sorted(out.items()))

    def by_id(self, schema_id: int) -> RegisteredSchema:
        """The schema of ``schema_id`` (cached for the process' life: ids never change)."""
        got = self._by_id.get(schema_id)
        if got is not None:
            return got
        s = self._call(f"schema id {schema_id}", lambda: self._client.get_schema(schema_id))
        got = RegisteredSchema(schema_id, s.schema_type or "AVRO", s.schema_str,
                               self._references(s.references))
        with self._lock:
            self._by_id[schema_id] = got
        return got

    def _registered(self, rs) -> RegisteredSchema:
        s = rs.schema
        self._raw_refs[(rs.subject, rs.version)] = tuple(s.references or ())
        got = RegisteredSchema(rs.schema_id, s.schema_type or "AVRO", s.schema_str,
                               self._references(s.references), rs.subject, rs.version)
        with self._lock:
            self._by_id.setdefault(rs.schema_id, got)
            self._by_version[(rs.subject, rs.version)] = got
        return got

    def version(self, subject: str, version: Optional[int]) -> RegisteredSchema:
        """Version ``version`` of ``subject``, or its latest (asked again each time: it moves)."""
        if version is not None:
            got = self._by_version.get((subject, version))
            if got is not None:
                return got
            return self._registered(self._call(
                f"version {version} of subject {subject!r}",
                lambda: self._client.get_version(subject, version)))
        return self._registered(self._call(f"the latest version of subject {subject!r}",
                                           lambda: self._client.get_latest_version(subject)))

    def register(self, subject: str, schema_type: str, text: str) -> int:
        """Register ``text`` under ``subject`` (idempotent: the same schema keeps its id)."""
        from confluent_kafka.schema_registry import Schema

        key = (subject, schema_type, text)
        if key in self._registered_ids:  # a streaming writer asks again each micro-batch
            return self._registered_ids[key]
        sid = self._call(f"registering a schema under subject {subject!r}",
                         lambda: self._client.register_schema(subject, Schema(text, schema_type)))
        log.info("schema registered under subject %r: id %d", subject, sid)
        self._registered_ids[key] = int(sid)
        return int(sid)

    def lookup(self, subject: str, schema_type: str, text: str) -> RegisteredSchema:
        """The registered version of ``text`` under ``subject`` (it must exist)."""
        from confluent_kafka.schema_registry import Schema

        return self._registered(self._call(
            f"looking up the DataFrame's schema under subject {subject!r}",
            lambda: self._client.lookup_schema(subject, Schema(text, schema_type))))


_REGISTRIES: dict[RegistryConfig, Registry] = {}
_REGISTRIES_LOCK = threading.Lock()


def registry_for(config: RegistryConfig) -> Registry:
    """The process' client of one registry (its caches serve every task the worker runs)."""
    with _REGISTRIES_LOCK:
        reg = _REGISTRIES.get(config)
        if reg is None:
            reg = _REGISTRIES[config] = Registry(config)
        return reg
