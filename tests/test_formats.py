"""Upgrades and downgrades: every file an earlier txkafka wrote reads the same with this one, and
a file in a newer format is refused, naming both versions, before anything acts on it.

The fixture sets under tests/fixtures/formats/ are real files of a query's checkpoint (the sink's
commit log, Spark's offsets with the reader's source offsets) and a savepoint, each written by the
txkafka named by its folder through the code that writes it in a query (generate.py). A format
bump adds a set; none is ever changed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.formats import generate
from tests.test_sink_core import FakeCoordinator
from txkafka.cli import main
from txkafka.connector import formats
from txkafka.connector.checkpoint.savepoint import kafka_offsets, read_savepoint
from txkafka.connector.checkpoint.spark_checkpoint import SparkCheckpoint
from txkafka.connector.errors import (
    CheckpointMovedError,
    KafkaConfigError,
    NewerFormatError,
    SavepointError,
    TransactionOutcomeUnknownError,
)
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.sink.committer import KafkaCommitter, known_verdicts
from txkafka.connector.sink.start_checks import read_record
from txkafka.connector.sink.transactional_ids import IdParts, TransactionalIdFactory
from txkafka.connector.source.offsets import batch_start_of, from_offset_json

SETS_DIR = Path(generate.__file__).parent
SETS = sorted(p for p in SETS_DIR.iterdir() if (p / "formats.json").is_file())
CURRENT = {f.name: f.current for f in formats.FORMATS}
REPO = Path(__file__).resolve().parent.parent


def _manifest(fixture_set: Path) -> dict[str, Any]:
    return json.loads((fixture_set / "formats.json").read_text())


def _newest() -> Path:
    """The set of the formats this txkafka writes."""
    same = [s for s in SETS if _manifest(s)["formats"] == CURRENT]
    assert same, (f"no fixture set has this txkafka's formats {CURRENT}: a format was bumped "
                  "without its fixtures; run `python -m tests.fixtures.formats.generate` with "
                  "the new code (connector/formats.py)")
    return same[-1]


def _copy(fixture_set: Path, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A copy of the set (readers run on the copy, the set stays as written) and its
    expected.json."""
    dest = tmp_path / fixture_set.name
    shutil.copytree(fixture_set, dest)
    return dest, json.loads((dest / "expected.json").read_text())


def _offsets(raw: dict[str, dict[str, int]]) -> dict[tuple[str, int], int]:
    return {(t, int(p)): o for t, parts in raw.items() for p, o in parts.items()}


def test_there_are_fixture_sets_and_one_has_the_current_formats():
    assert SETS, f"no fixture set under {SETS_DIR}"
    _newest()


@pytest.mark.parametrize("fixture_set", SETS, ids=[s.name for s in SETS])
def test_every_fixture_set_reads_as_it_was_written(fixture_set, tmp_path, capsys):
    root, expected = _copy(fixture_set, tmp_path)
    ck = str(root / "checkpoint")
    log = SinkCommitLog(ck)

    sink = expected["sink"]
    ident = log.existing_identity()
    assert (ident.sink_id, ident.prefix) == (sink["sink_id"], sink["prefix"])
    assert log.identity("another-prefix").sink_id == sink["sink_id"]  # read, never re-created

    listing = log.listing()
    assert sorted(listing) == sorted(int(b) for b in expected["batches"])
    for b, want in expected["batches"].items():
        state = log.batch_state(int(b), listing)
        assert state.empty is want["empty"], b
        assert [r.number for r in state.rounds] == [r["number"] for r in want["rounds"]], b
        for rnd, w in zip(state.rounds, want["rounds"]):
            where = f"batch {b} round {rnd.number}"
            assert [c.to_json() for c in rnd.decision] == w["transactions"], where
            assert rnd.all_partitions == w["all_partitions"], where
            assert list(rnd.source_offsets) == w["source_offsets"], where
            layout = None if rnd.layout is None else {str(p): i.to_json()
                                                      for p, i in rnd.layout.items()}
            assert layout == w["layout"], where
            if w["committed"] is None:
                assert rnd.outcome is None, where
            else:
                assert sorted(rnd.outcome["committed"]) == sorted(w["committed"]), where
                assert sorted(c.transactional_id for c in rnd.lost) == sorted(w["lost"]), where
        assert state.source_offsets == tuple(want["rounds"][0]["source_offsets"]), b
    assert [b for b in listing if log.batch_state(b, listing).pending is not None] == \
        [int(b) for b, w in expected["batches"].items() if w["rounds"][-1]["committed"] is None]
    assert [b for b in listing if log.batch_state(b, listing).redo_partitions] == []

    # The tasks' digest of what they read still gives what the decisions recorded: a lost round
    # decided by that txkafka can be re-written by this one (invariant 12).
    for b, per_task in expected["rows"].items():
        for rnd in log.batch_state(int(b), listing).rounds:
            for p, read in (rnd.layout or {}).items():
                assert generate.digest(per_task[str(p)]) == read, (b, p)

    for b, note in expected["unresolved"].items():
        got = log.read_unresolved(int(b), note["round"])
        assert {k: got[k] for k in ("committed", "lost", "unknown", "resolved")} == \
            {k: note[k] for k in ("committed", "lost", "unknown", "resolved")}
        verdicts = known_verdicts(got)
        assert verdicts == {**{t: "committed" for t in note["committed"]},
                            **{t: "lost" for t in note["lost"]}, **note["resolved"]}

    place = expected.get("place")  # sets from 0.2.0 on: the generator's checkpoint
    if place is not None:
        assert log.recorded_place() == place
        with pytest.raises(CheckpointMovedError, match="moved or copied"):
            log.require_own_place()  # the set is a copy of that checkpoint

    checks = expected.get("start_checks")  # sets from 0.2.0 on: what the start checks found
    if checks is not None:
        found = read_record(generate.Query(root / "checkpoint").cfg, log)
        assert found is not None
        assert {str(b): f.to_json() for b, f in found.brokers.items()} == checks["brokers"]
        assert sorted(found.unasked) == checks["unasked"]

    ids = TransactionalIdFactory(sink["prefix"], sink["sink_id"])
    for tid, parts in expected["transactional_ids"].items():
        assert ids.parse(tid) == IdParts(**parts), tid

    spark = SparkCheckpoint(ck)
    assert spark.query_id() == expected["query_id"]
    assert spark.committed_batch_ids() == expected["spark_commits"]
    for b, want in expected["offsets"].items():
        entry = spark.read_offsets(int(b))
        assert list(entry.sources) == want["lines"], b
        for line, source in zip(entry.sources, want["sources"]):
            data = kafka_offsets(line)
            if source is None:
                assert data is None, line  # not a Kafka source
                continue
            assert from_offset_json(json.loads(line)) == _offsets(source["end"]), line
            start = batch_start_of(json.loads(line))
            assert start == (None if source["start"] is None else _offsets(source["start"])), line

    sp = read_savepoint(str(root / "savepoint.json"))
    want = expected["savepoint"]
    assert (sp.batch_id, sp.basis) == (want["batch_id"], want["basis"])
    assert {k: sp.origin[k] for k in ("query_id", "sink_id", "sink_prefix")} == \
        {k: want[k] for k in ("query_id", "sink_id", "sink_prefix")}
    assert sp.positions == _offsets(want["positions"])
    assert {t: {str(i): o for i, o in by.items()} for t, by in sp.conflicts.items()} == \
        {t: {i: _offsets(o) for i, o in by.items()} for t, by in want["conflicts"].items()}
    assert [s.to_json() for s in sp.sources] == want["sources"]

    # The operator's commands read it too.
    assert main(["commit-log", "show", "--checkpoint", ck, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [b["batch"] for b in shown["batches"]] == sorted(int(b) for b in expected["batches"])
    assert [b["batch"] for b in shown["batches"] if b["status"].startswith("OUTCOME UNKNOWN")] \
        == sorted(int(b) for b in expected["unresolved"])
    assert main(["savepoint", "show", str(root / "savepoint.json")]) == 0


def test_a_later_run_continues_the_newest_set_and_rewrites_nothing_the_release_reads(tmp_path):
    """After an upgrade the query continues where the older txkafka stopped; afterwards every
    file of the log is still in a format the older txkafka reads (a downgrade works), and the
    only file changed is the one record that is ever rewritten, the unresolved note."""
    root, expected = _copy(_newest(), tmp_path)
    ck = root / "checkpoint"
    before = {p: p.read_bytes() for p in ck.rglob("*") if p.is_file()}
    q = generate.Query(ck)
    assert q.ids.sink_id == expected["sink"]["sink_id"]
    undetermined = [t for t in expected["batches"]["3"]["rounds"][0]["transactions"]
                    if t["transactional_id"] not in known_verdicts(q.log.read_unresolved(3, 0))]
    assert [t["partition_id"] for t in undetermined] == [2]

    # Batch 3's outcome is still unknown for task partition 2: the restart stops, as it did.
    with pytest.raises(TransactionOutcomeUnknownError, match=undetermined[0]["transactional_id"]):
        q.committer()
    assert main(["commit-log", "resolve", "--checkpoint", str(ck), "--batch", "3", "--lost",
                 "--yes"]) == 0
    run = "run-3"
    plan = q.committer().plan()
    assert (plan.batch_id, plan.redo) == (3, frozenset({2}))
    q.committer().commit(3, [q.task(3, 0, run, writes=False), q.task(3, 1, run, writes=False),
                             q.task(3, 2, run)])
    q.spark_commit(3)
    q.offsets(4)
    q.committer().commit(4, [q.task(4, p, run) for p in (0, 1)])
    assert q.log.batch_state(3).complete and q.log.batch_state(4).complete

    changed = sorted(str(p.relative_to(ck)) for p, data in before.items() if p.read_bytes() != data)
    assert changed == ["txkafka-sink/log/00000000000000000003-000.unresolved.json"]
    release = _manifest(_newest())["formats"]
    for path in sorted((ck / "txkafka-sink").rglob("*.json")):
        fmt = generate._record_kind(path.name)
        assert json.loads(path.read_text()).get("version", 1) == release[fmt.name], path


def _shape_gaps(old: Any, new: Any, at: str = "") -> list[str]:
    """Where ``new`` lacks a field of ``old``, or holds another kind of value there."""
    def kind(v: Any) -> str:
        return "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else \
            type(v).__name__

    if kind(old) != kind(new):
        return [f"{at or '/'}: {kind(old)} then, {kind(new)} now"]
    if isinstance(old, dict):
        return [gap for k in old for gap in (
            _shape_gaps(old[k], new[k], f"{at}/{k}") if k in new else [f"{at}/{k}: missing"])]
    if isinstance(old, list) and old and new:
        return _shape_gaps(old[0], new[0], f"{at}[0]")
    return []


def test_this_txkafka_writes_every_field_the_release_of_its_formats_reads(tmp_path):
    """The same generator run with this tree's code writes, in each file of the newest set, every
    field with the same kind of value: a field removed, renamed or retyped without a format bump
    (which an older txkafka would misread) fails here."""
    release = _newest()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    generate.write_set(fresh)
    old_ids = json.loads((release / "expected.json").read_text())
    new_ids = json.loads((fresh / "expected.json").read_text())
    assert _manifest(fresh)["formats"] == _manifest(release)["formats"]

    def same_ids(text: str) -> str:
        # Random per run: the sink id (in every transactional id) and the query id.
        for key in ("sink_id",):
            text = text.replace(new_ids["sink"][key], old_ids["sink"][key])
        return text.replace(new_ids["query_id"], old_ids["query_id"])

    gaps = []
    for name, entry in _manifest(release)["files"].items():
        old_text, new_text = (release / name).read_text(), same_ids((fresh / name).read_text())
        if entry["kind"] == formats.SOURCE_OFFSET.name:
            olds, news = old_text.splitlines()[2:], new_text.splitlines()[2:]
            assert len(olds) == len(news), name
            gaps += [f"{name}: {g}" for o, n in zip(olds, news)
                     for g in _shape_gaps(json.loads(o), json.loads(n))]
        else:
            gaps += [f"{name}: {g}"
                     for g in _shape_gaps(json.loads(old_text), json.loads(new_text))]
    assert not gaps, "\n".join(gaps)


# ------------------------------------------------------------------------- newer formats

def _bump(path: Path, version: int, written_by: str | None = "99.1.0") -> None:
    rec = json.loads(path.read_text())
    rec[formats.VERSION_KEY] = version
    if written_by:
        rec[formats.WRITER_KEY] = written_by
    path.write_text(json.dumps(rec))


def _assert_names_both(e: NewerFormatError, fmt: formats.FileFormat, file: str,
                       written_by: str | None = "99.1.0") -> None:
    msg = str(e)
    assert (e.found, e.supported, e.written_by) == (fmt.current + 1, fmt.current, written_by)
    assert file in msg and file in e.file, msg
    assert f"format {fmt.current + 1}; this txkafka {formats.txkafka_version()} reads formats " \
           f"up to {fmt.current}" in msg, msg
    upgrade = f"upgrade txkafka to {written_by} (the version that wrote it) or newer" if \
        written_by else f"upgrade txkafka to a version that reads {fmt.name} format"
    assert upgrade in msg and "Upgrading txkafka" in msg, msg


LOG_RECORDS = {
    # kind -> (file under the checkpoint, how a reader reads it)
    "sink.json": ("txkafka-sink/sink.json", lambda log: log.existing_identity()),
    "place record": ("txkafka-sink/place.json", lambda log: log.recorded_place()),
    "decision record": ("txkafka-sink/log/00000000000000000000-000.decision.json",
                        lambda log: log.batch_state(0)),
    "outcome record": ("txkafka-sink/log/00000000000000000002-001.outcome.json",
                       lambda log: log.batch_state(2)),
    "empty-batch record": ("txkafka-sink/log/00000000000000000001-000.empty.json",
                           lambda log: log.batch_state(1)),
    "unresolved note": ("txkafka-sink/log/00000000000000000003-000.unresolved.json",
                        lambda log: log.read_unresolved(3, 0)),
}


@pytest.mark.parametrize("kind", sorted(LOG_RECORDS))
def test_a_commit_log_record_in_a_newer_format_is_refused(kind, tmp_path):
    fmt = next(f for f in formats.FORMATS if f.name == kind)
    root, _ = _copy(_newest(), tmp_path)
    name, read = LOG_RECORDS[kind]
    log = SinkCommitLog(str(root / "checkpoint"))
    read(log)  # as written: readable
    _bump(root / "checkpoint" / name, fmt.current + 1)
    with pytest.raises(NewerFormatError) as exc:
        read(log)
    _assert_names_both(exc.value, fmt, name.rsplit("/", 1)[1])


def test_a_start_checks_record_in_a_newer_format_is_checked_again_not_refused(tmp_path):
    """The one cache among the files: a newer one is not trusted, and the sink asks the cluster
    again (tests/test_sink_start_checks.py runs that), instead of stopping the query."""
    fmt = formats.START_CHECKS
    assert fmt.cache and not any(f.cache for f in formats.FORMATS if f is not fmt)
    root, _ = _copy(_newest(), tmp_path)
    q = generate.Query(root / "checkpoint")
    assert read_record(q.cfg, q.log) is not None  # as written: trusted
    _bump(root / "checkpoint" / "txkafka-sink" / "start-checks.json", fmt.current + 1)
    assert read_record(q.cfg, q.log) is None


def test_the_sink_acts_on_nothing_once_a_newer_txkafka_wrote_its_log(tmp_path, capsys):
    """A downgraded query, the operator's commands and the savepoint command all stop at the
    newer record: no EndTxn, no abort, nothing written."""
    root, expected = _copy(_newest(), tmp_path)
    ck = root / "checkpoint"
    _bump(ck / "txkafka-sink/log/00000000000000000003-000.decision.json", 3)
    before = {p: p.read_bytes() for p in ck.rglob("*") if p.is_file()}
    q = generate.Query(ck)
    with pytest.raises(NewerFormatError, match="00000000000000000003-000.decision.json"):
        q.committer()  # Spark's streamWriter() call: recovery reads the newest batch first
    assert q.fake.calls == []
    for argv in (["commit-log", "show", "--checkpoint", str(ck)],
                 ["commit-log", "resolve", "--checkpoint", str(ck), "--batch", "3", "--lost",
                  "--yes"],
                 ["transactions", "abort", "-b", "127.0.0.1:9", "--checkpoint", str(ck), "--yes"],
                 ["savepoint", "create", "--checkpoint", str(ck), "--out",
                  str(tmp_path / "sp.json"), "-b", "127.0.0.1:9", "--quiet-period", "0"]):
        with pytest.raises(SystemExit, match="^error: .*was written by a newer txkafka"):
            main(argv)
    assert {p: p.read_bytes() for p in ck.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "sp.json").exists()


def test_a_source_offset_in_a_newer_format_is_refused(tmp_path):
    fmt = formats.SOURCE_OFFSET
    root, expected = _copy(_newest(), tmp_path)
    line = json.loads(expected["offsets"]["0"]["lines"][0])
    assert from_offset_json({**line, "txkafka:format": fmt.current}) == from_offset_json(line)
    newer = {**line, "txkafka:format": fmt.current + 1}
    for read in (from_offset_json, lambda d: kafka_offsets(json.dumps(d))):
        with pytest.raises(NewerFormatError) as exc:
            read(newer)
        _assert_names_both(exc.value, fmt, "offsets/<batch>", written_by=None)
    with pytest.raises(KafkaConfigError, match="not a positive whole number"):
        from_offset_json({**line, "txkafka:format": "2"})

    # Through the savepoint command: Spark's newest offsets/N holds it.
    ck = root / "checkpoint"
    entry = (ck / "offsets" / "3").read_text().splitlines()
    data = json.loads(entry[2])
    entry[2] = json.dumps({**data, "txkafka:format": fmt.current + 1})
    (ck / "offsets" / "3").write_text("\n".join(entry) + "\n")
    with pytest.raises(SystemExit, match="^error: the source offset .*was written by a newer") \
            as exc:
        main(["savepoint", "create", "--checkpoint", str(ck), "--out", str(tmp_path / "sp.json"),
              "-b", "127.0.0.1:9", "--quiet-period", "0"])
    # The command knows the file and the checkpoint: the message names both.
    msg = str(exc.value)
    assert f"(a line of {ck / 'offsets' / '3'})" in msg, msg
    assert f"commit-log show --checkpoint {ck}`" in msg, msg


def test_a_savepoint_in_a_newer_format_is_refused(tmp_path, capsys):
    fmt = formats.SAVEPOINT
    root, _ = _copy(_newest(), tmp_path)
    path = root / "savepoint.json"
    _bump(path, fmt.current + 1)
    for error in (SavepointError, KafkaConfigError):  # the command's and the reader option's
        with pytest.raises(NewerFormatError) as exc:
            read_savepoint(str(path), error=error, name="option 'savepoint'")
        _assert_names_both(exc.value, fmt, str(path))
    with pytest.raises(SystemExit, match="^error: savepoint .*written by a newer txkafka"):
        main(["savepoint", "show", str(path)])


def test_a_version_that_is_not_a_positive_whole_number_is_damage_not_a_newer_format(tmp_path):
    root, _ = _copy(_newest(), tmp_path)
    path = root / "checkpoint" / LOG_RECORDS["decision record"][0]
    _bump(path, 0, written_by=None)
    with pytest.raises(Exception, match="format version 0, not a positive whole number") as exc:
        SinkCommitLog(str(root / "checkpoint")).batch_state(0)
    assert not isinstance(exc.value, NewerFormatError)


def test_the_error_survives_pickling():
    import pickle

    e = NewerFormatError("m", file="f", found=3, supported=2, written_by="9.0.0")
    back = pickle.loads(pickle.dumps(e))
    assert (str(back), back.file, back.found, back.supported, back.written_by) == \
        ("m", "f", 3, 2, "9.0.0")


def test_the_operations_reference_lists_every_format():
    """docs/operations-reference.md's table: file, where, format, written since, as
    connector/formats.py, and what an earlier version does with a newer format: a cache is ignored
    (so it never stands in the way of a downgrade), any other file refused."""
    page = (REPO / "docs" / "operations-reference.md").read_text()
    section = page.split("## File formats", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if re.match(r"\|\s*\S", line)]
    header, table = rows[0], [r for r in rows[2:] if len(r) == 5]
    assert header == ["file", "where", "format", "written since", "in a newer format"], header
    assert [(name, int(version), since) for name, _where, version, since, _ in table] == \
        [(f.name, f.current, f.since) for f in formats.FORMATS]
    assert [w.replace("`", "") for _n, w, _v, _s, _o in table] == [f.where for f in formats.FORMATS]
    assert [o == "ignored: a cache" if f.cache else o.startswith("refused")
            for (*_, o), f in zip(table, formats.FORMATS)] == [True] * len(table), table
