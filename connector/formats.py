"""Format versions of every file txkafka keeps, and the one check that reads them.

A later txkafka reads what an earlier one wrote; an earlier one must not act on what it cannot
read. So each kind of file carries the version of its format (``"version"``) and the txkafka that
wrote it (``"txkafka_version"``); every reader checks the version here before it uses a field, and
a file in a newer format than this txkafka reads raises ``NewerFormatError`` naming both versions.
A file without a version (written before txkafka recorded one) is format 1.

The rules that keep this true (docs/operations-reference.md, "File formats", has the table for
users):

- A change that an older reader would misread (a field removed, renamed or given another meaning;
  a record kind whose absence changes what the log says) bumps that kind's ``current`` and sets
  ``since`` to the release that first writes it. Fields an older reader ignores need no bump.
- A new file kind that older versions may ignore needs no bump (the commit log lists only the
  record names it knows).
- Each bump adds a fixture set beside the earlier ones (``tests/fixtures/formats``); every earlier
  set must still read as it was written.
- A cache (``cache=True``: what txkafka can ask again, the sink's start checks) is never refused: a
  reader trusts only its own format (:func:`is_current`) and computes anything else afresh, so a
  newer file costs one more look at the cluster, never a stopped query.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Mapping

from .errors import NewerFormatError

VERSION_KEY = "version"
WRITER_KEY = "txkafka_version"

_UPGRADE_DOC = "docs/operations.md, 'Upgrading txkafka'"
# Where the checkpoint's files were written by a newer txkafka: the output holds what the sink
# committed, and the newer txkafka's `commit-log show` names where it ends, as startingOffsets.
_NEW_CHECKPOINT = (
    "to stay on {mine}, continue on a NEW checkpointLocation: with the newer txkafka, `txkafka "
    "commit-log show --checkpoint {checkpoint}` prints the startingOffsets that continue after "
    "the last batch its sink committed")


@dataclass(frozen=True)
class FileFormat:
    """One kind of file txkafka writes: the format this txkafka writes and reads up to."""

    name: str       # how messages and the docs' table name the file
    where: str      # where it lives (the docs' table)
    current: int    # the newest format this txkafka reads, and the one it writes
    since: str      # the first txkafka release that wrote format ``current``
    # What to do instead of upgrading, after "or " ({mine}: this txkafka's version; {checkpoint}).
    otherwise: str
    cache: bool = False  # recomputed when not in the current format, never refused


SINK_JSON = FileFormat(
    "sink.json", "<checkpoint>/txkafka-sink/sink.json", 2, "0.1.0", _NEW_CHECKPOINT)
DECISION = FileFormat(
    "decision record", "<checkpoint>/txkafka-sink/log/<batch>-<round>.decision.json", 2, "0.1.0",
    _NEW_CHECKPOINT)
OUTCOME = FileFormat(
    "outcome record", "<checkpoint>/txkafka-sink/log/<batch>-<round>.outcome.json", 1, "0.1.0",
    _NEW_CHECKPOINT)
EMPTY_BATCH = FileFormat(
    "empty-batch record", "<checkpoint>/txkafka-sink/log/<batch>-000.empty.json", 2, "0.1.0",
    _NEW_CHECKPOINT)
UNRESOLVED = FileFormat(
    "unresolved note", "<checkpoint>/txkafka-sink/log/<batch>-<round>.unresolved.json", 1, "0.1.0",
    _NEW_CHECKPOINT)
SOURCE_OFFSET = FileFormat(
    "source offset", "<checkpoint>/offsets/<batch>, a txkafka source's line", 1, "0.1.0",
    _NEW_CHECKPOINT)
SAVEPOINT = FileFormat(
    "savepoint", "the file of txkafka savepoint create --out", 1, "0.1.0",
    "to stay on {mine}, set the reader's startingOffsets to the positions that the newer "
    "txkafka's `txkafka savepoint show --json` prints")

PLACE = FileFormat(
    "place record", "<checkpoint>/txkafka-sink/place.json", 1, "0.2.0", _NEW_CHECKPOINT)
START_CHECKS = FileFormat(
    "start-checks record", "<checkpoint>/txkafka-sink/start-checks.json", 2, "0.2.0",
    "", cache=True)

FORMATS: tuple[FileFormat, ...] = (SINK_JSON, DECISION, OUTCOME, EMPTY_BATCH, UNRESOLVED,
                                   SOURCE_OFFSET, SAVEPOINT, PLACE, START_CHECKS)


@functools.cache
def txkafka_version() -> str:
    """The installed txkafka's version ("unknown" when run from a tree that was never installed:
    the package metadata is the one source this layer may read)."""
    try:
        return metadata.version("txkafka")
    except metadata.PackageNotFoundError:
        return "unknown"


def stamp(fmt: FileFormat) -> dict[str, Any]:
    """The fields every file of ``fmt`` carries: its format and the txkafka that wrote it."""
    return {VERSION_KEY: fmt.current, WRITER_KEY: txkafka_version()}


def is_current(fmt: FileFormat, record: Mapping[str, Any]) -> bool:
    """Whether ``record`` is in the format this txkafka writes: the one form of a cache it trusts
    (any other, older, newer or damaged, is computed afresh, never refused)."""
    version = record.get(VERSION_KEY)
    return not isinstance(version, bool) and version == fmt.current


def check_version(fmt: FileFormat, version: Any, where: str, *, written_by: Any = None,
                  damaged: type[Exception], checkpoint: str | None = None) -> int:
    """``version`` as read from ``where`` (None: written before versions, format 1), if this
    txkafka reads it. A newer one raises NewerFormatError (``checkpoint``, when known, names the
    query's checkpoint in it); one that is not a positive whole number raises ``damaged``."""
    if version is None:
        return 1
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise damaged(f"{where} has format version {version!r}, not a positive whole number: the "
                      f"{fmt.name} is damaged")
    if version > fmt.current:
        raise NewerFormatError(_newer_message(fmt, version, where, written_by, checkpoint),
                               file=where, found=version, supported=fmt.current,
                               written_by=str(written_by) if written_by else None)
    return version


def check_record(fmt: FileFormat, record: Mapping[str, Any], where: str, *,
                 damaged: type[Exception], checkpoint: str | None = None) -> int:
    """``check_version`` for a JSON file that carries ``version`` and ``txkafka_version``."""
    return check_version(fmt, record.get(VERSION_KEY), where, written_by=record.get(WRITER_KEY),
                         damaged=damaged, checkpoint=checkpoint)


def _newer_message(fmt: FileFormat, version: int, where: str, written_by: Any,
                   checkpoint: str | None) -> str:
    mine = txkafka_version()
    target = f"{written_by} (the version that wrote it)" if written_by else (
        f"a version that reads {fmt.name} format {version}")
    otherwise = fmt.otherwise.format(mine=mine, checkpoint=checkpoint or "<checkpoint>")
    return (f"{where} was written by a newer txkafka (format {version}; this txkafka {mine} reads "
            f"formats up to {fmt.current}): upgrade txkafka to {target} or newer, on the driver "
            f"and the executors, or {otherwise} ({_UPGRADE_DOC})")
