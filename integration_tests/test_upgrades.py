"""Upgrades and downgrades of a running query, in real Spark against Apache Kafka.

A query whose checkpoint holds the files of the previous release (the 0.1.0 fixture set's shape)
continues exactly once with this txkafka; a checkpoint to which a newer txkafka wrote a format
this one does not read (a sink record, or the reader's offset in Spark's offsets/) stops the query
with NewerFormatError before anything is written, and the "upgraded" restart then continues
exactly once. Checked with read_committed consumers (duplicates and gaps) and for records written
in any transaction (read_uncommitted).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from integration_tests.pipeline_helpers import PipelineTopics, assert_exactly_once, make_input
from integration_tests.test_writer_exactly_once import _query
from tests.fixtures.formats import generate
from txkafka.connector import formats
from txkafka.connector.sink.commit_log import SinkCommitLog

RELEASE = Path(generate.__file__).parent / "0.1.0"


def _release_fields() -> dict[str, set[str]]:
    """Every field the release wrote, per kind of commit log file (its fixture set)."""
    fields: dict[str, set[str]] = {}
    for name, entry in json.loads((RELEASE / "formats.json").read_text())["files"].items():
        if name.startswith("checkpoint/txkafka-sink/"):
            fields.setdefault(entry["kind"], set()).update(json.loads((RELEASE / name).read_text()))
    return fields


def _as_the_release_wrote_it(ck: Path) -> None:
    """Rewrite the sink's files without the fields this txkafka adds to the release's formats;
    a kind of file the release did not write (the start checks' record, a cache) is removed."""
    release = _release_fields()
    for path in sorted((ck / "txkafka-sink").rglob("*.json")):
        kind = generate._record_kind(path.name).name
        if kind not in release:
            path.unlink()
            continue
        rec = json.loads(path.read_text())
        rec.pop(formats.WRITER_KEY, None)
        if formats.VERSION_KEY not in release[kind]:
            rec.pop(formats.VERSION_KEY, None)
        # Fields added since (which an older reader ignores, so no format bump) go.
        rec = {k: v for k, v in rec.items() if k in release[kind]}
        path.write_text(json.dumps(rec, sort_keys=True, indent=1))


def _fails_with(q, match: str) -> None:
    try:
        with pytest.raises(StreamingQueryException, match=match):
            stopped = q.awaitTermination(180)
            pytest.fail("the query " + ("stopped without an error" if stopped
                                        else "still runs after 180 s"))
    finally:
        if q.isActive:
            q.stop()


def _written(kafka, topic: str) -> int:
    """Records in the topic, committed or not: any record a task wrote."""
    return len(kafka.read_all(topic, isolation="read_uncommitted"))


def test_a_checkpoint_of_the_release_continues_and_a_newer_format_stops_the_query(spark, kafka,
                                                                                  tmp_path):
    # The formats do not depend on the broker's version: one Kafka version is enough.
    topics = make_input(kafka, records=1000)
    ck = tmp_path / "ck"
    q = _query(spark, kafka, topics, str(ck), max_offsets=500)
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    _as_the_release_wrote_it(ck)
    more = 500
    kafka.produce(topics.source, [(f"late-{i:05d}", f"value-late-{i}") for i in range(more)],
                  transactional=True)
    topics = PipelineTopics(topics.source, topics.sink, topics.expected_ids + more)
    log = SinkCommitLog(str(ck))
    newest = log.latest()
    written = _written(kafka, topics.sink)

    # A newer txkafka wrote the newest batch's record: the sink refuses before any task writes.
    kind, fmt = ("empty", formats.EMPTY_BATCH) if newest.empty else ("decision", formats.DECISION)
    record = Path(log.log_dir) / f"{newest.batch_id:020d}-{newest.last.number:03d}.{kind}.json"
    original = record.read_bytes()
    record.write_text(json.dumps({**json.loads(original), "version": fmt.current + 1,
                                  "txkafka_version": "99.1.0"}))
    _fails_with(_query(spark, kafka, topics, str(ck)),
                rf"{record.name} was written by a newer txkafka \(format {fmt.current + 1}; this "
                rf"txkafka .* reads formats up to {fmt.current}\): upgrade txkafka to 99\.1\.0")
    record.write_bytes(original)

    # A newer txkafka's source offset in Spark's offsets/ (the end of the newest batch, which
    # Spark hands back as the next batch's start): the reader refuses.
    offsets = ck / "offsets" / str(newest.batch_id)
    original = offsets.read_bytes()
    lines = original.decode().splitlines()
    lines[2] = json.dumps({**json.loads(lines[2]), "txkafka:format": 2})
    (ck / "offsets" / f".{newest.batch_id}.crc").unlink(missing_ok=True)
    offsets.write_text("\n".join(lines) + "\n")
    _fails_with(_query(spark, kafka, topics, str(ck)),
                r"the source offset .* was written by a newer txkafka \(format 2; this txkafka .* "
                r"reads formats up to 1\)")
    offsets.write_bytes(original)

    assert _written(kafka, topics.sink) == written  # not even an aborted record
    assert SinkCommitLog(str(ck)).latest().batch_id == newest.batch_id

    # Upgraded again: the query continues where the release's files say.
    q = _query(spark, kafka, topics, str(ck))
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert SinkCommitLog(str(ck)).latest().batch_id > newest.batch_id
    assert_exactly_once(kafka, topics, str(ck))
