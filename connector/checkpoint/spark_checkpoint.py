"""Spark's streaming checkpoint as txkafka reads it: the one owner of its layout.

Layout (Spark 3.x/4.x, ``MicroBatchExecution``), under ``checkpointLocation``:

    metadata          {"id": "<query id>"}: written when a query first starts
    offsets/<N>       line 1 "v1", line 2 the batch metadata (batchWatermarkMs, batchTimestampMs,
                      conf), then one line per source: that source's end offset for batch N
                      (JSON for Kafka-like sources; "-" for a source that has none yet)
    commits/<N>       written after batch N's sink commit; its presence means "batch N is done"
    sources/, state/  per-source and state-store data (not read here)

Spark writes ``offsets/N`` before it plans batch N (so before the sink's ``streamWriter()`` for
batch N runs) and ``commits/N`` after the sink's ``commit(N)`` returned. Files are written once,
atomically; ``.crc`` and temporary files sit beside them and are ignored here.

Paths go through pyarrow.fs, so HDFS, S3 and GCS checkpoints read like local ones.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from ..errors import CommitLogError
from .object_store import S3Settings, is_s3, s3_bucket_path
from ..secrets_redaction import redact_uri, redact_uri_text

METADATA = "metadata"
OFFSETS = "offsets"
COMMITS = "commits"
# The folders Spark adds a file to at every batch.
BATCH_FOLDERS = (OFFSETS, COMMITS)

# Hadoop's names for its S3 connectors; pyarrow's S3 filesystem answers to s3 only.
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}


def checkpoint_filesystem(location: str, *, error: type[Exception] = CommitLogError,
                          name: str = "checkpoint location",
                          s3: S3Settings | None = None) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and path of a checkpoint URI or local path.

    A URI's credentials never reach the error (pyarrow echoes the URI). ``error``/``name`` let a
    command line say which of its arguments was wrong. ``s3``: the endpoint and credentials of an
    S3 checkpoint (default: the AWS environment variables and credential chain).
    """
    if is_s3(location) and "@" not in location.partition("://")[2].split("/", 1)[0] \
            and "?" not in location:
        settings = s3 if s3 is not None else S3Settings.from_options()
        if settings.given:
            try:
                return settings.filesystem(), s3_bucket_path(location)
            except Exception as e:  # noqa: BLE001 - pyarrow raises several types
                raise error(f"cannot open {name} {redact_uri(location)!r}: "
                            f"{redact_uri_text(str(e), location)}") from None
    if "://" in location or location.startswith("file:"):
        scheme, sep, rest = location.partition("://")
        uri = f"{_SCHEME_ALIASES.get(scheme.lower(), scheme)}{sep}{rest}" if sep else location
        try:
            return pafs.FileSystem.from_uri(uri)
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types
            raise error(
                f"cannot open {name} {redact_uri(location)!r}: "
                f"{redact_uri_text(str(e), location)}") from None
    return pafs.LocalFileSystem(), os.path.abspath(location)


def checkpoint_place(location: str, fs: pafs.FileSystem, path: str) -> str:
    """Where a checkpoint lives, spelled one way for one place: ``file://`` and the real absolute
    path on local disk (a bare path, ``file:/`` and ``file:///``, a trailing slash, a symbolic
    link), else the URI's scheme (Hadoop's ``s3a``/``s3n`` as ``s3``), host and port, and path,
    without user, password or query (never a secret). ``fs``/``path``: what
    :func:`checkpoint_filesystem` made of ``location``."""
    if isinstance(fs, pafs.LocalFileSystem):
        return "file://" + os.path.realpath(path or "/")
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    clean = posixpath.normpath("/" + "/".join(s for s in parts.path.split("/") if s))
    return f"{_SCHEME_ALIASES.get(scheme, scheme)}://{host}{clean}"


@dataclass(frozen=True)
class OffsetLogEntry:
    """One ``offsets/N`` file: the batch's metadata and each source's end offset, as logged."""

    batch_id: int
    metadata: dict[str, Any]
    # One raw offset per source: in the query's source order (Spark's offset log v1), or by
    # source name (v2, sources named with .name(): ``names`` holds them, in the same order).
    sources: tuple[str, ...]
    names: tuple[str, ...] = ()
    # Where it was read (credentials redacted), for messages; empty for an entry built otherwise.
    path: str = field(default="", compare=False)
    checkpoint: str = field(default="", compare=False)

    @property
    def watermark_ms(self) -> int:
        try:
            return int(self.metadata.get("batchWatermarkMs", 0))
        except (TypeError, ValueError):
            return 0

    def source_offsets(self) -> list[Any]:
        """Each source's offset parsed from JSON (a line that is not JSON stays a string)."""
        out: list[Any] = []
        for line in self.sources:
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append(line)
        return out

    def topic_offsets(self, topic: str) -> dict[int, int]:
        """{partition: end offset} of ``topic`` from the (last) Kafka-shaped source that reads it."""
        ends: dict[int, int] = {}
        for src in self.source_offsets():
            if isinstance(src, dict) and isinstance(src.get(topic), dict):
                ends = {int(p): int(o) for p, o in src[topic].items()}
        return ends


def same_source_offsets(a: list[Any] | tuple[Any, ...], b: list[Any] | tuple[Any, ...]) -> bool:
    """Whether two batches read the same offsets, compared as parsed JSON (key order and the
    int/str form of partition keys after a restart do not matter; values do)."""
    return _canonical(list(a)) == _canonical(list(b))


def _canonical(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


@dataclass
class SparkCheckpoint:
    """Read-only view of one query's checkpoint. Never writes: Spark owns these files."""

    location: str
    error: type[Exception] = CommitLogError
    name: str = "checkpoint location"
    s3: S3Settings | None = field(default=None, repr=False)
    fs: pafs.FileSystem = field(init=False, repr=False)
    root: str = field(init=False)

    def __post_init__(self) -> None:
        self.fs, root = checkpoint_filesystem(self.location, error=self.error, name=self.name,
                                              s3=self.s3)
        self.root = root.rstrip("/")

    def _path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    @property
    def place(self) -> str:
        """Where this checkpoint lives (:func:`checkpoint_place`): the same for every spelling of
        one place, different for a moved or copied checkpoint."""
        return checkpoint_place(self.location, self.fs, self.root)

    @property
    def metadata_path(self) -> str:
        return self._path(METADATA)

    def offsets_path(self, batch_id: int) -> str:
        return self._path(OFFSETS, str(batch_id))

    def commit_path(self, batch_id: int) -> str:
        return self._path(COMMITS, str(batch_id))

    def _exists(self, path: str) -> bool:
        try:
            return self.fs.get_file_info(path).type != pafs.FileType.NotFound
        except OSError as e:
            raise self.error(f"cannot read {redact_uri(path)}: {e}") from None

    def has_metadata(self) -> bool:
        """Whether Spark's ``metadata`` file is here (Spark writes it when the query starts)."""
        return self._exists(self.metadata_path)

    def missing_offset_log(self) -> str | None:
        """The checkpoint's folder, or else its ``offsets/``, if it does not exist (redacted for
        messages); None when the offset log is there."""
        for path in (self.root, self._path(OFFSETS)):
            if not self._exists(path):
                return redact_uri(path)
        return None

    def query_id(self) -> str | None:
        raw = self._read_text(self.metadata_path)
        if raw is None:
            return None
        try:
            return str(json.loads(raw.splitlines()[0]).get("id")) or None
        except (ValueError, IndexError, AttributeError):
            return None

    def batch_ids(self, folder: str) -> list[int]:
        """Batch ids with a file in ``offsets`` or ``commits`` (sorted; .crc and temp files skipped)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self._path(folder), allow_not_found=True))
        except OSError as e:
            raise self.error(f"cannot list {redact_uri(self._path(folder))}: {e}") from None
        return sorted(int(i.base_name) for i in infos if i.base_name.isdigit())

    def offsets_batch_ids(self) -> list[int]:
        """Batches Spark planned (logged in ``offsets/``), sorted."""
        return self.batch_ids(OFFSETS)

    def committed_batch_ids(self) -> list[int]:
        """Batches Spark finished (``commits/``), sorted."""
        return self.batch_ids(COMMITS)

    def latest_offsets_batch(self) -> int | None:
        return max(self.offsets_batch_ids(), default=None)

    def latest_committed_batch(self) -> int | None:
        return max(self.committed_batch_ids(), default=None)

    def has_commit(self, batch_id: int) -> bool:
        """Whether Spark wrote ``commits/N``: batch N is done, and any task of it still running
        is a loser or a zombie."""
        return self._exists(self.commit_path(batch_id))

    def read_offsets(self, batch_id: int) -> OffsetLogEntry | None:
        """``offsets/N`` parsed, or None if Spark has not logged batch N (or it was removed)."""
        raw = self._read_text(self.offsets_path(batch_id))
        if raw is None:
            return None
        lines = raw.splitlines()
        version = lines[0].strip() if lines else ""
        if version not in ("v1", "v2"):
            raise self.error(
                f"{redact_uri(self.offsets_path(batch_id))} starts with {version[:20]!r}: Spark's "
                "offset log formats v1 and v2 are read, not this one (a newer Spark, or not a "
                "checkpoint's file); this txkafka cannot use this checkpoint")
        try:
            metadata = json.loads(lines[1]) if len(lines) > 1 else {}
        except ValueError:
            metadata = {}
        metadata = metadata if isinstance(metadata, dict) else {}
        where = {"path": redact_uri(self.offsets_path(batch_id)),
                 "checkpoint": redact_uri(self.location)}
        if version == "v1":
            return OffsetLogEntry(batch_id, metadata, tuple(lines[2:]), **where)
        # v2: "<source name>:<offset>" per line, in no set order: sorted by name here.
        named = sorted(tuple(line.split(":", 1)) for line in lines[2:] if ":" in line)
        return OffsetLogEntry(batch_id, metadata, tuple(o for _, o in named),
                              tuple(n for n, _ in named), **where)

    def describe_offsets(self, batch_id: int) -> str | None:
        """The sources' offsets of batch N on one line, for error messages."""
        entry = self.read_offsets(batch_id)
        return " | ".join(entry.sources) if entry is not None and entry.sources else None

    def _read_text(self, path: str) -> str | None:
        try:
            with self.fs.open_input_stream(path) as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return None
        except OSError as e:
            if "not found" in str(e).lower() or "no such file" in str(e).lower():
                return None
            raise self.error(f"cannot read {redact_uri(path)}: {e}") from None
