"""``txkafka verify``: check a pipeline's output against its input for duplicates, gaps and order.

Both topics are read with read_committed consumers from the start to their last stable offsets.
Each record must carry a unique id (its key, a header, or its value); the verifier reports how many
ids were expected, found, duplicated, missing and unexpected, plus order violations: within one
output partition, records that came from the same input partition must keep their input order.
With ``--checkpoint`` (the query's checkpointLocation) the ids the query's committed batches read
(Spark's offset log) must be out exactly once, and later input at most once: a running query or
one stopped mid-batch can be checked.
The exit code is non-zero on any duplicate, missing or unexpected record (an output record without
an id is unexpected), so it can gate a deployment.

Every check needs evidence: a run with nothing to verify (an empty input or output topic, a
misspelt ``--id``, no input record with a key, no window the watermark closed, no committed batch
in the offset log) fails with the reason; ``--allow-empty`` accepts an empty run when one is
expected (any output record that no input explains still fails). In every check an output record
without an id (key) is unexpected.

Stateful aggregations have no per-record id; two checks cover streaming counts:

- ``--check windowed-counts``: a count per (key, event-time window) written in append mode (output
  key ``<key>@<window start ms>``, value the count; what ``txkafka.pipeline --mode aggregate``
  writes). Every window the watermark closed must be in the output exactly once, with exactly the
  number of committed input records of that key and window. With ``--checkpoint`` (the query's
  checkpointLocation) the watermark is the one Spark logged for its last committed batch, so the
  set of windows that must be out is exact; without it, ``--watermark-ms`` gives the delay.
- ``--check counts``: ``groupBy(key).count()`` in update mode (key = group, value = count; e.g.
  Spark's own Kafka sink): every (key, count) update exactly once, in increasing order, each key's
  last update equal to its input count. With ``--checkpoint`` the check is exact per micro-batch
  (Spark's offset log says which records each batch read, hence which updates it must emit), so a
  lost batch is caught even when a later update of the same key hides it.
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

from .connector.errors import TxKafkaError
from .connector.checkpoint.object_store import S3Settings
from .connector.checkpoint.spark_checkpoint import SparkCheckpoint
from .connector.secrets_redaction import redact_uri
from .kafka_admin import scan_topic


IdExtractor = Callable[[object], bytes | None]


class _Verdict:
    """The verdict every report shares: no failure AND evidence (something was checked), unless
    the caller allowed an empty run. ``ok`` drives both the printed verdict and the exit code."""

    allow_empty: bool

    def _failures(self) -> int:
        raise NotImplementedError

    def _nothing_reasons(self) -> list[str]:
        raise NotImplementedError

    @property
    def nothing_checked(self) -> str | None:
        """Why this run verified nothing (None when it checked something)."""
        return "; ".join(self._nothing_reasons()) or None

    @property
    def ok(self) -> bool:
        return self._failures() == 0 and (self.nothing_checked is None or self.allow_empty)

    @property
    def verdict(self) -> str:
        return "EXACTLY ONCE" if self.ok else "FAILED"

    def _evidence_lines(self) -> list[str]:
        empty = self.nothing_checked
        if not empty:
            return []
        return [f"  nothing verified: {empty}" + (
            " (allowed by --allow-empty)" if self.allow_empty else
            "; --allow-empty accepts such a run when it is expected")]

    @staticmethod
    def _example_lines(examples: dict[str, list[str]]) -> list[str]:
        return [f"  e.g. {kind}: {', '.join(ex)}" for kind, ex in examples.items() if ex]


@dataclass
class VerifyReport(_Verdict):
    input_topic: str
    output_topic: str
    id_in: str = "key"
    id_out: str = "key"
    allow_empty: bool = False  # an empty run passes (only when the caller says so)
    input_records: int = 0     # committed input records read, with or without an id
    input_without_id: int = 0  # a failure: a 1:1 pipeline's output cannot account for them
    input_repeated: int = 0    # input records whose id an earlier input record has (a failure)
    output_without_id: int = 0  # counted as unexpected: no input record can have produced them
    expected: int = 0
    found: int = 0
    distinct_found: int = 0
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0
    order_violations: int = 0
    input_partitions: int = 0
    output_partitions: int = 0
    # With a checkpoint: only input the query's committed batches read must be out; the rest
    # (read by a batch Spark has not committed, or not read yet) may be out once.
    with_checkpoint: bool = False
    batches: int = 0           # committed batches of the offset log
    pending_input: int = 0     # input ids after the last committed batch's end offsets
    seconds: float = 0.0
    examples: dict[str, list[str]] = field(default_factory=dict)

    def _failures(self) -> int:
        return (self.duplicates + self.missing + self.unexpected + self.order_violations
                + self.input_without_id + self.input_repeated)

    def _nothing_reasons(self) -> list[str]:
        """A misspelt --id, the wrong or an empty input or output topic, or a checkpoint whose
        committed batches read none of the input."""
        out = []
        if self.expected == 0 and self.with_checkpoint and self.pending_input:
            out.append(f"no committed batch of the checkpoint's offset log ({self.batches} "
                       f"committed) read any of the {self.pending_input} input ids of "
                       f"{self.input_topic} (is --checkpoint the query's checkpointLocation?)")
        elif self.expected == 0:
            out.append(f"the input topic {self.input_topic} holds no committed record"
                       if self.input_records == 0 else
                       f"none of the {self.input_records} input records carries an id under the "
                       f"input id spec {self.id_in!r} (is --id / --id-in misspelt?)")
        if self.found == 0:
            out.append(f"the output topic {self.output_topic} holds no committed record")
        return out

    def text(self) -> str:
        lines = [f"txkafka verify: {self.input_topic} -> {self.output_topic}: {self.verdict}"]
        lines += self._evidence_lines()
        lines += [
            f"  expected ids       {self.expected}"
            + (f" (read by {self.batches} committed batches of the checkpoint; "
               f"{self.pending_input} later input ids may be out once)"
               if self.with_checkpoint else ""),
            f"  input without id   {self.input_without_id} (their output cannot be told apart: "
            f"every input record needs an id under {self.id_in!r})" if self.input_without_id
            else None,
            f"  repeated input ids {self.input_repeated} (input records whose id an earlier "
            "one has: the ids check needs unique ids)" if self.input_repeated else None,
            f"  found records      {self.found} ({self.distinct_found} distinct ids)",
            f"  duplicates         {self.duplicates}",
            f"  missing            {self.missing}",
            f"  unexpected         {self.unexpected}"
            + (f" ({self.output_without_id} output records without an id under the output "
               f"id spec {self.id_out!r})" if self.output_without_id else ""),
            f"  order violations   {self.order_violations}",
        ]
        return "\n".join([x for x in lines if x is not None] + self._example_lines(self.examples))


def id_extractor(spec: str) -> IdExtractor:
    """``key``, ``value`` or ``header:NAME``."""
    if spec == "key":
        return lambda m: m.key()
    if spec == "value":
        return lambda m: m.value()
    if spec.startswith("header:"):
        name = spec.split(":", 1)[1]

        def from_header(m) -> bytes | None:
            for k, v in m.headers() or ():
                if k == name:
                    return v
            return None

        return from_header
    raise ValueError(f"--id must be key, value or header:NAME, got {spec!r}")


def verify(conf: dict, input_topic: str, output_topic: str, *, id_in: str = "key",
           id_out: str = "key", check_order: bool = True,
           input_records: Iterable | None = None, allow_empty: bool = False,
           whole: bool = True, checkpoint: str | None = None,
           s3: S3Settings | None = None) -> VerifyReport:
    """Check every input id is in the output exactly once (and in order).

    An input without any id fails unless ``allow_empty``: otherwise a misspelt ``id_in`` or the
    wrong input topic would check nothing and still pass. An output record without an id counts
    as unexpected: no input record can have produced it. ``whole=False`` reads what is committed
    now, without waiting for open transactions (a look at a pipeline still running: no verdict).
    ``checkpoint``: the query's; then the input its committed batches read (Spark's offset log)
    must be out exactly once, later input at most once (a running query can be checked).
    """
    started = time.monotonic()
    rep = VerifyReport(input_topic, output_topic, id_in=id_in, id_out=id_out,
                       allow_empty=allow_empty, with_checkpoint=bool(checkpoint))
    read_until: dict[int, int] | None = None
    if checkpoint:
        batches, committed, _marks = _offset_log(checkpoint, input_topic, s3)
        done = [ends for b, ends in sorted(batches, key=lambda x: x[0]) if b in committed]
        rep.batches = len(committed)
        read_until = done[-1] if done else {}
    get_in, get_out = id_extractor(id_in), id_extractor(id_out)
    origin: dict[bytes, tuple[int, int]] = {}
    pending: set[bytes] = set()  # after read_until: not required, at most once
    repeated: list[str] = []
    in_parts: set[int] = set()
    for m in (input_records if input_records is not None
              else scan_topic(conf, input_topic, whole=whole)):
        rep.input_records += 1
        rid = get_in(m)
        if rid is None:
            rep.input_without_id += 1
            continue
        if rid in origin:
            rep.input_repeated += 1
            if len(repeated) < 5:
                first = origin[rid]
                repeated.append(f"{_show(rid)} at {input_topic}[{first[0]}]@{first[1]} and "
                                f"[{m.partition()}]@{m.offset()}")
        origin.setdefault(rid, (m.partition(), m.offset()))
        in_parts.add(m.partition())
        if read_until is not None and m.offset() >= read_until.get(m.partition(), 0):
            pending.add(rid)
    rep.expected = len(origin) - len(pending)
    rep.pending_input = len(pending)
    rep.input_partitions = len(in_parts)

    counts: Counter[bytes] = Counter()
    last_seen: dict[tuple[int, int], int] = {}  # (output partition, input partition) -> offset
    out_parts: set[int] = set()
    order_examples: list[str] = []
    no_id_examples: list[str] = []
    for m in scan_topic(conf, output_topic, whole=whole):
        rid = get_out(m)
        if rid is None:
            rep.output_without_id += 1
            out_parts.add(m.partition())
            if len(no_id_examples) < 5:
                no_id_examples.append(f"no id at {output_topic}[{m.partition()}]@{m.offset()}")
            continue
        counts[rid] += 1
        out_parts.add(m.partition())
        src = origin.get(rid)
        if check_order and src is not None and counts[rid] == 1:
            key = (m.partition(), src[0])
            prev = last_seen.get(key)
            if prev is not None and src[1] < prev:
                rep.order_violations += 1
                if len(order_examples) < 5:
                    order_examples.append(_show(rid))
            last_seen[key] = src[1] if prev is None else max(prev, src[1])
    rep.found = sum(counts.values()) + rep.output_without_id
    rep.distinct_found = len(counts)
    dups = [rid for rid, n in counts.items() if n > 1]
    rep.duplicates = sum(counts[rid] - 1 for rid in dups)
    missing = [rid for rid in origin if rid not in counts and rid not in pending]
    unexpected = [rid for rid in counts if rid not in origin]
    rep.missing, rep.unexpected = len(missing), len(unexpected) + rep.output_without_id
    rep.output_partitions = len(out_parts)
    rep.examples = {
        "duplicates": [_show(r) for r in dups[:5]],
        "missing": [_show(r) for r in missing[:5]],
        "unexpected": [_show(r) for r in unexpected[:5]],
        "unexpected without id": no_id_examples,
        "repeated input ids": repeated,
        "order": order_examples,
    }
    rep.seconds = round(time.monotonic() - started, 3)
    return rep


# ---------------------------------------------------------------------------- streaming counts


@dataclass
class CountReport(_Verdict):
    """The exactly-once verdict on a streaming count (groupBy(key).count(), update mode)."""

    input_topic: str
    output_topic: str
    allow_empty: bool = False   # an empty run passes (only when the caller says so)
    with_checkpoint: bool = False  # checked per batch against Spark's offset log
    input_total: int = 0        # committed input records read, with or without a key
    input_without_key: int = 0  # ... without a key (no group: skipped)
    keys: int = 0               # distinct keys in the committed input
    input_records: int = 0      # committed input records the counts cover
    pending_input: int = 0      # committed input records after the last logged batch (not read yet)
    batches: int = 0            # batches checked against the offset log (0: final counts only)
    expected_updates: int = 0   # (key, count) updates the output must hold (with a checkpoint)
    found_updates: int = 0      # output records, with or without a key
    output_without_key: int = 0  # counted as unexpected: no group can have produced them
    duplicates: int = 0         # an update found more than once
    missing: int = 0            # an update never found (a key's final count, or a batch's update)
    unexpected: int = 0         # an update no batch can have emitted (unknown key, wrong count)
    order_violations: int = 0   # a key's counts not strictly increasing in its output partition
    wrong_final: int = 0        # keys whose last count is not their number of input records
    output_partitions: int = 0
    seconds: float = 0.0
    examples: dict[str, list[str]] = field(default_factory=dict)

    def _failures(self) -> int:
        return (self.duplicates + self.missing + self.unexpected + self.order_violations
                + self.wrong_final)

    def _nothing_reasons(self) -> list[str]:
        out = []
        keyed = self.input_total - self.input_without_key
        if self.input_total == 0:
            out.append(f"the input topic {self.input_topic} holds no committed record")
        elif keyed == 0:
            out.append(f"none of the {self.input_total} input records has a key (a group)")
        elif self.with_checkpoint and self.expected_updates == 0:
            out.append(f"no committed batch of the checkpoint's offset log ({self.batches} "
                       f"batches) read any of the {keyed} keyed input records of "
                       f"{self.input_topic} (is --checkpoint the query's checkpointLocation?)")
        if self.found_updates == 0:
            out.append(f"the output topic {self.output_topic} holds no committed record")
        return out

    # The id check's names, so callers can treat both reports alike.
    @property
    def expected(self) -> int:
        return self.input_records

    @property
    def found(self) -> int:
        return self.found_updates

    def text(self) -> str:
        how = (f"per batch, {self.batches} batches of the offset log" if self.with_checkpoint
               else "final counts")
        lines = [f"txkafka verify (counts, {how}): {self.input_topic} -> {self.output_topic}: "
                 f"{self.verdict}"]
        lines += self._evidence_lines()
        lines += [
            f"  keys               {self.keys} ({self.input_records} input records"
            + (f", {self.pending_input} not read yet" if self.pending_input else "")
            + (f"; {self.input_without_key} without a key, skipped" if self.input_without_key
               else "") + ")",
            f"  updates            {self.found_updates} found"
            + (f", {self.expected_updates} expected" if self.with_checkpoint else ""),
            f"  duplicates         {self.duplicates}",
            f"  missing            {self.missing}",
            f"  unexpected         {self.unexpected}"
            + (f" ({self.output_without_key} output records without a key)"
               if self.output_without_key else ""),
            f"  order violations   {self.order_violations}",
            f"  wrong final count  {self.wrong_final}",
        ]
        return "\n".join(lines + self._example_lines(self.examples))


class CheckpointError(TxKafkaError):
    """The query's checkpoint location (Spark's offset log) cannot be opened, or is not there."""


def read_offset_log(checkpoint: str, topic: str, s3: S3Settings | None = None
                    ) -> tuple[list[tuple[int, dict[int, int]]], set[int]]:
    """Spark's offset log for one Kafka topic: [(batch, {partition: end offset})] and the batches
    that have a commit entry. The end offsets of batch N-1 are the start offsets of batch N.
    ``s3``: an S3 checkpoint's settings (default: the AWS environment)."""
    batches, committed, _marks = _offset_log(checkpoint, topic, s3)
    return batches, committed


def _open_offset_log(checkpoint: str, s3: S3Settings | None = None) -> SparkCheckpoint:
    """The query's checkpoint, refused when its offset log is not there: a mistyped path would
    read as an empty log and verify nothing."""
    ck = SparkCheckpoint(checkpoint, error=CheckpointError, name="--checkpoint", s3=s3)
    missing = ck.missing_offset_log()
    if missing is not None:
        raise CheckpointError(
            f"--checkpoint {redact_uri(checkpoint)}: no Spark offset log there ({missing} does "
            "not exist). Give the checkpointLocation of the query that wrote --output.")
    return ck


def _offset_log(checkpoint: str, topic: str, s3: S3Settings | None = None):
    """(batches with end offsets, committed batch ids, {batch: batchWatermarkMs})."""
    ck = _open_offset_log(checkpoint, s3)
    batches: list[tuple[int, dict[int, int]]] = []
    marks: dict[int, int] = {}
    for b in ck.offsets_batch_ids():
        entry = ck.read_offsets(b)
        if entry is None:
            continue
        marks[b] = entry.watermark_ms
        batches.append((b, entry.topic_offsets(topic)))
    return batches, set(ck.committed_batch_ids()), marks


def _parse_count(raw: bytes | None) -> int | None:
    try:
        return int(raw.decode()) if raw is not None else None
    except (UnicodeDecodeError, ValueError):
        return None


def verify_counts(conf: dict, input_topic: str, output_topic: str, *,
                  checkpoint: str | None = None, input_records: Iterable | None = None,
                  output_records: Iterable | None = None, allow_empty: bool = False,
                  s3: S3Settings | None = None) -> CountReport:
    """Check a streaming count's output; exact per batch when the query's checkpoint is given.

    A run that checked nothing (no keyed input, no committed batch, no output) fails unless
    ``allow_empty``; an output record without a key is unexpected."""
    started = time.monotonic()
    rep = CountReport(input_topic, output_topic, allow_empty=allow_empty,
                      with_checkpoint=bool(checkpoint))
    batches, committed = read_offset_log(checkpoint, input_topic, s3) if checkpoint else ([], set())
    # Per partition, the end offset of every batch (a batch whose end lacks the partition ends
    # where it started; Spark's offsets only grow).
    bounds = {p: _running_max([e.get(p, -1) for _b, e in batches])
              for p in {p for _b, e in batches for p in e}}

    def batch_of(partition: int, offset: int) -> int | None:
        """Index into ``batches`` of the batch that read this record, None if none did yet."""
        ends = bounds.get(partition)
        if ends is None:
            return None
        i = bisect.bisect_right(ends, offset)
        return i if i < len(batches) else None

    per_batch: dict[int, list[bytes]] = defaultdict(list)
    final: Counter[bytes] = Counter()
    for m in (input_records if input_records is not None
              else scan_topic(conf, input_topic, whole=True)):
        rep.input_total += 1
        key = m.key()
        if key is None:
            rep.input_without_key += 1
            continue
        if checkpoint:
            i = batch_of(m.partition(), m.offset())
            if i is None:
                rep.pending_input += 1
                continue
            per_batch[i].append(key)
        final[key] += 1
    rep.keys = len(final)
    rep.input_records = sum(final.values())

    # Expected updates: each batch emits every key it read, with the key's running count.
    required: set[tuple[bytes, int]] = set()
    optional: set[tuple[bytes, int]] = set()  # batches logged but not committed yet: may be out
    committed_final: Counter[bytes] = Counter()
    if checkpoint:
        running: Counter[bytes] = Counter()
        for i, (b, _ends) in enumerate(batches):
            for key in per_batch.get(i, ()):
                running[key] += 1
            for key in set(per_batch.get(i, ())):
                (required if b in committed else optional).add((key, running[key]))
                if b in committed:
                    committed_final[key] = running[key]
        rep.batches = len(batches)
        rep.expected_updates = len(required)

    seen: Counter[tuple[bytes, int]] = Counter()
    last: dict[bytes, int] = {}
    out_parts: set[int] = set()
    ex: dict[str, list[str]] = {"duplicates": [], "missing": [], "unexpected": [], "order": [],
                                "wrong final": []}

    def note(kind: str, text: str) -> None:
        if len(ex[kind]) < 5:
            ex[kind].append(text)

    for m in (output_records if output_records is not None
              else scan_topic(conf, output_topic, whole=True)):
        key = m.key()
        out_parts.add(m.partition())
        rep.found_updates += 1
        if key is None:
            rep.output_without_key += 1
            rep.unexpected += 1
            note("unexpected", f"no key at {output_topic}[{m.partition()}]@{m.offset()}")
            continue
        count = _parse_count(m.value())
        if count is None or key not in final:
            rep.unexpected += 1
            note("unexpected", f"{_show(key)}={m.value()!r}")
            continue
        pair = (key, count)
        seen[pair] += 1
        if seen[pair] > 1:
            rep.duplicates += 1
            note("duplicates", f"{_show(key)}={count}")
        elif checkpoint and pair not in required and pair not in optional:
            rep.unexpected += 1
            note("unexpected", f"{_show(key)}={count}")
        elif not checkpoint and not 1 <= count <= final[key]:
            rep.unexpected += 1
            note("unexpected", f"{_show(key)}={count} (input has {final[key]})")
        prev = last.get(key)
        if prev is not None and count <= prev and seen[pair] == 1:
            rep.order_violations += 1
            note("order", f"{_show(key)}: {prev} then {count}")
        last[key] = count if prev is None else max(prev, count)
    rep.output_partitions = len(out_parts)

    if checkpoint:
        for pair in required:
            if not seen[pair]:
                rep.missing += 1
                note("missing", f"{_show(pair[0])}={pair[1]}")
        optional_top: dict[bytes, int] = {}
        for k, c in optional:
            optional_top[k] = max(c, optional_top.get(k, 0))
        for key, want in committed_final.items():
            if not want <= last.get(key, 0) <= max(want, optional_top.get(key, 0)):
                rep.wrong_final += 1
                note("wrong final", f"{_show(key)}: last {last.get(key)}, expected {want}")
    else:
        for key, want in final.items():
            got = last.get(key)
            if got is None or got < want:
                rep.missing += 1
                note("missing", f"{_show(key)}={want} (last update {got})")
            if got != want:
                rep.wrong_final += 1
                note("wrong final", f"{_show(key)}: last {got}, expected {want}")
    rep.examples = {k: v for k, v in ex.items() if v}
    rep.seconds = round(time.monotonic() - started, 3)
    return rep


# ------------------------------------------------------------------- windowed counts (append)


@dataclass
class WindowCountReport(_Verdict):
    """The verdict on a count per (key, event-time window) written in append mode."""

    input_topic: str
    output_topic: str
    window_ms: int
    allow_empty: bool = False        # an empty run passes (only when the caller says so)
    watermark_ms: int | None = None  # windows ending at or before it must be in the output
    input_total: int = 0             # committed input records read, with or without a key
    input_without_key: int = 0       # ... without a key (no group: skipped)
    groups: int = 0                  # (key, window) groups in the committed input
    closed: int = 0                  # ... of which the watermark closed: each must be out once
    open: int = 0                    # ... still open (not expected yet)
    input_records: int = 0           # committed input records in closed windows
    found: int = 0                   # output records, with or without a key
    output_without_key: int = 0      # counted as unexpected: no window can have produced them
    duplicates: int = 0              # a window written more than once
    missing: int = 0                 # a closed window never written
    unexpected: int = 0              # a window with no input, or written before it closed
    wrong_counts: int = 0            # a window written with another count than its input's
    seconds: float = 0.0
    examples: dict[str, list[str]] = field(default_factory=dict)

    def _failures(self) -> int:
        return self.duplicates + self.missing + self.unexpected + self.wrong_counts

    def _nothing_reasons(self) -> list[str]:
        out = []
        if self.input_total == 0:
            out.append(f"the input topic {self.input_topic} holds no committed record")
        elif self.groups == 0:
            out.append(f"none of the {self.input_total} input records has a key (a group)")
        elif self.closed == 0:
            out.append(f"the watermark {self.watermark_ms} closed none of the {self.groups} "
                       "(key, window) groups of the input, so no window had to be out yet")
        if self.found == 0:
            out.append(f"the output topic {self.output_topic} holds no committed record")
        return out

    @property
    def expected(self) -> int:
        return self.input_records

    def text(self) -> str:
        lines = [
            f"txkafka verify (windowed counts, {self.window_ms} ms windows): {self.input_topic} -> "
            f"{self.output_topic}: {self.verdict}",
            *self._evidence_lines(),
            f"  windows            {self.groups} ({self.closed} closed by the watermark "
            f"{self.watermark_ms}, {self.open} open)",
            f"  input records      {self.input_records} in closed windows"
            + (f" ({self.input_without_key} without a key, skipped)" if self.input_without_key
               else ""),
            f"  found records      {self.found}",
            f"  duplicates         {self.duplicates}",
            f"  missing            {self.missing}",
            f"  unexpected         {self.unexpected}"
            + (f" ({self.output_without_key} output records without a key)"
               if self.output_without_key else ""),
            f"  wrong counts       {self.wrong_counts}",
        ]
        return "\n".join(lines + self._example_lines(self.examples))


def verify_windowed_counts(conf: dict, input_topic: str, output_topic: str, window_ms: int, *,
                           checkpoint: str | None = None, watermark_delay_ms: int | None = None,
                           input_records: Iterable | None = None,
                           output_records: Iterable | None = None,
                           allow_empty: bool = False,
                           s3: S3Settings | None = None) -> WindowCountReport:
    """Check a windowed count's output (key ``<key>@<window start ms>``, value the count).

    The windows that must be out: with a checkpoint, those ending at or before the watermark Spark
    logged for its last committed batch (a later, uncommitted batch may have written more); else
    those ending at or before the newest input timestamp minus ``watermark_delay_ms``. A run
    that checked nothing (no closed window, no output) fails unless ``allow_empty``; an output
    record without a key is unexpected.
    """
    started = time.monotonic()
    if checkpoint:
        _open_offset_log(checkpoint, s3)  # a wrong path fails now, not after the topics are read
    rep = WindowCountReport(input_topic, output_topic, window_ms, allow_empty=allow_empty)
    counts: Counter[tuple[bytes, int]] = Counter()
    newest = None
    for m in (input_records if input_records is not None
              else scan_topic(conf, input_topic, whole=True)):
        rep.input_total += 1
        key = m.key()
        if key is None:
            rep.input_without_key += 1
            continue
        ts = m.timestamp()[1]
        counts[(key, ts - ts % window_ms)] += 1
        newest = ts if newest is None else max(newest, ts)
    may_close = None
    if checkpoint:
        _batches, committed, marks = _offset_log(checkpoint, input_topic, s3)
        done = [b for b in marks if b in committed]
        rep.watermark_ms = marks[max(done)] if done else 0
        may_close = max(marks.values(), default=0)
    elif watermark_delay_ms is not None and newest is not None:
        rep.watermark_ms = newest - watermark_delay_ms
    wm = rep.watermark_ms
    closed = {g for g in counts if wm is not None and g[1] + window_ms <= wm}
    maybe = {g for g in counts if may_close is not None and g not in closed
             and g[1] + window_ms <= may_close}
    rep.groups, rep.closed = len(counts), len(closed)
    rep.open = rep.groups - rep.closed
    rep.input_records = sum(counts[g] for g in closed)

    ex: dict[str, list[str]] = {"duplicates": [], "missing": [], "unexpected": [],
                                "wrong counts": []}

    def note(kind: str, text: str) -> None:
        if len(ex[kind]) < 5:
            ex[kind].append(text)

    seen: Counter[tuple[bytes, int]] = Counter()
    for m in (output_records if output_records is not None
              else scan_topic(conf, output_topic, whole=True)):
        raw = m.key()
        rep.found += 1
        if raw is None:
            rep.output_without_key += 1
            rep.unexpected += 1
            note("unexpected", f"no key at {output_topic}[{m.partition()}]@{m.offset()}")
            continue
        key, _, start = raw.rpartition(b"@")
        count = _parse_count(m.value())
        try:
            group = (key, int(start))
        except ValueError:
            rep.unexpected += 1
            note("unexpected", _show(raw))
            continue
        seen[group] += 1
        label = f"{_show(key)}@{group[1]}"
        if seen[group] > 1:
            rep.duplicates += 1
            note("duplicates", label)
        elif group not in counts or (wm is not None and group not in closed and group not in maybe):
            rep.unexpected += 1
            note("unexpected", f"{label}={count}")
        elif count != counts[group]:
            rep.wrong_counts += 1
            note("wrong counts", f"{label}: {count}, input has {counts[group]}")
    for g in closed:
        if not seen[g]:
            rep.missing += 1
            note("missing", f"{_show(g[0])}@{g[1]}")
    rep.examples = {k: v for k, v in ex.items() if v}
    rep.seconds = round(time.monotonic() - started, 3)
    return rep


def _running_max(values: list[int]) -> list[int]:
    out, top = [], -1
    for v in values:
        top = max(top, v)
        out.append(top)
    return out


def _show(rid: bytes) -> str:
    try:
        return rid.decode()
    except (UnicodeDecodeError, AttributeError):
        return repr(rid)


def cmd_verify(args: argparse.Namespace) -> int:
    from . import exit_codes
    from .cli_options import CommandLineError, KafkaConnection, checkpoint_store_from_args

    conf = dict(KafkaConnection.from_args(args).client_conf)
    s3 = checkpoint_store_from_args(args)
    if args.check == "windowed-counts" and not args.checkpoint and args.watermark_ms is None:
        raise CommandLineError("--check windowed-counts needs --checkpoint or --watermark-ms")
    try:
        rep = _run_check(conf, args, s3)
    except CheckpointError as e:
        raise CommandLineError.unreadable(str(e)) from None
    payload = {**asdict(rep), "ok": rep.ok, "nothing_checked": rep.nothing_checked}
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(payload, fh, indent=2)
    print(json.dumps(payload, indent=2) if args.json else rep.text())
    return exit_codes.OK if rep.ok else exit_codes.FINDINGS


def _run_check(conf: dict, args: argparse.Namespace, s3: S3Settings | None
               ) -> VerifyReport | CountReport | WindowCountReport:
    if args.check == "counts":
        return verify_counts(conf, args.input, args.output, checkpoint=args.checkpoint,
                             allow_empty=args.allow_empty, s3=s3)
    if args.check == "windowed-counts":
        return verify_windowed_counts(conf, args.input, args.output, args.window_ms,
                                      checkpoint=args.checkpoint,
                                      watermark_delay_ms=args.watermark_ms,
                                      allow_empty=args.allow_empty, s3=s3)
    return verify(conf, args.input, args.output, id_in=args.id_in or args.id,
                  id_out=args.id_out or args.id, check_order=not args.no_order,
                  allow_empty=args.allow_empty, checkpoint=args.checkpoint, s3=s3)


def register_cli(sub) -> None:
    from .cli_options import (add_checkpoint_option, add_checkpoint_store_options, add_json_flag,
                              add_kafka_options)

    p = sub.add_parser("verify", help="check that an output topic holds each input record "
                       "exactly once")
    add_kafka_options(p, cluster="the cluster of both topics")
    p.add_argument("--input", required=True, metavar="TOPIC", help="the input topic")
    p.add_argument("--output", required=True, metavar="TOPIC", help="the output topic")
    p.add_argument("--check", choices=["ids", "windowed-counts", "counts"], default="ids",
                   help="ids: each input id once in the output, in order per partition; "
                        "windowed-counts: one count per (key, event-time window), as an "
                        "append-mode windowed count writes it (key KEY@WINDOWSTARTMS, value the "
                        "count); counts: every update of a groupBy(key).count() once, as an "
                        "update-mode query writes it (txkafka's sink writes append only: this "
                        "checks another sink's output)")
    p.add_argument("--id", default="key", metavar="WHERE",
                   help="ids: where the unique id is: key, value or header:NAME")
    p.add_argument("--id-in", metavar="WHERE", help="ids: the id's place in the input, if it "
                   "differs (default: --id)")
    p.add_argument("--id-out", metavar="WHERE", help="ids: the id's place in the output, if it "
                   "differs (default: --id)")
    p.add_argument("--no-order", action="store_true", help="ids: skip the per-partition order check")
    add_checkpoint_option(p, required=False, note="Spark's offset log makes the check exact "
                          "(ids: the input its committed batches read must be out once, later "
                          "input at most once)")
    p.add_argument("--window-ms", type=int, default=2000, metavar="MS",
                   help="windowed-counts: the window length")
    p.add_argument("--watermark-ms", type=int, default=None, metavar="MS",
                   help="windowed-counts without --checkpoint: the query's watermark delay")
    p.add_argument("--allow-empty", action="store_true",
                   help="pass a run that verified nothing (an empty input or output, no id or "
                        "key, no closed window, no committed batch) when that is expected; "
                        "without it such a run fails. Output records no input explains still fail")
    add_json_flag(p, "the report")
    p.add_argument("--json-out", metavar="FILE", help="also write the report as JSON to FILE")
    add_checkpoint_store_options(p)
    p.set_defaults(func=cmd_verify)


if __name__ == "__main__":  # pragma: no cover
    from .cli import main

    sys.exit(main(["verify", *sys.argv[1:]]))
