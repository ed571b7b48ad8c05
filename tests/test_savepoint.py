"""Savepoints without Spark or a broker: the file format, the position choice, the refusal rules
of ``txkafka savepoint create`` (against the fake coordinator of test_sink_core) and the reader
option. Against real Spark and Kafka: integration_tests/test_savepoint.py."""

from __future__ import annotations

import json
import os
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from tests.test_reader_stream_start import FakeLogs, logged, ranges, stream
from tests.test_sink_core import FakeCoordinator, _committer, _decide_then_crash, _results
from tests.spark_checkpoint_files import write_commits, write_metadata, write_offsets
from txkafka.cli import main
from txkafka.connector.errors import KafkaConfigError, SavepointError
from txkafka.connector.source.offsets import BATCH_START_KEY
from txkafka.connector.checkpoint.savepoint import (
    BASIS_BATCH_0,
    BASIS_NONE,
    BASIS_SINK,
    BASIS_SPARK,
    KIND_KAFKA,
    KIND_OTHER,
    Savepoint,
    SourcePosition,
    committed_batch,
    merge_sources,
    read_savepoint,
    savepoint_start,
    sources_of,
    starting_offsets,
    write_savepoint,
)
from txkafka.connector.source.options import parse_source_options
from txkafka.connector.checkpoint.spark_checkpoint import OffsetLogEntry
from txkafka.connector.client.error_codes import INVALID_PRODUCER_ID_MAPPING
from txkafka.connector.client.transactions import TransactionDescription
from txkafka.savepoint import Snapshot, TxnView, create, movements

T0, T1 = ("t", 0), ("t", 1)


def _sp(positions=None, conflicts=None, sources=None, **origin) -> Savepoint:
    positions = dict(positions if positions is not None else {T0: 10, T1: 20})
    sources = sources if sources is not None else (SourcePosition(0, KIND_KAFKA, positions),)
    return Savepoint(positions, conflicts or {}, tuple(sources),
                     {"checkpoint": "/ck", "query_id": "q", "sink_id": "s1", "sink_prefix": "p-s1-",
                      "batch_id": 3, "basis": BASIS_SPARK, **origin}, 1_700_000_000_000, "0.1.0")


# ------------------------------------------------------------------------------ the file

def test_the_file_is_readable_json_and_round_trips(tmp_path):
    sp = _sp(conflicts={"u": {0: {("u", 0): 1}, 1: {("u", 0): 2}}},
             sources=(SourcePosition(0, KIND_KAFKA, {T0: 10, T1: 20, ("u", 0): 1}),
                      SourcePosition(1, KIND_KAFKA, {("u", 0): 2}),
                      SourcePosition(2, KIND_OTHER, {}, '{"logOffset":4}')))
    path = tmp_path / "sp.json"
    assert write_savepoint(sp, str(path)) == str(path)
    data = json.loads(path.read_text())
    assert data["format"] == "txkafka-savepoint" and data["version"] == 1
    assert data["positions"] == {"t": {"0": 10, "1": 20}}
    assert data["created"] == "2023-11-14T22:13:20Z" and data["txkafka_version"] == "0.1.0"
    assert data["origin"]["batch_id"] == 3 and data["origin"]["query_id"] == "q"
    assert "\n" in path.read_text()  # indented: a person can read it
    back = read_savepoint(str(path))
    assert back == sp
    assert back.topics() == ["t", "u"]
    text = back.text(str(path))
    for part in ("end of batch 3", "t  0:10 1:20", "source #0", "savepointSource",
                 '#2 not Kafka (not restored): {"logOffset":4}'):
        assert part in text


def test_a_savepoint_is_never_overwritten_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "sub" / "sp.json"
    write_savepoint(_sp(), str(path))
    with pytest.raises(SavepointError, match="exists already; a savepoint is never overwritten"):
        write_savepoint(_sp(positions={T0: 99}), str(path))
    assert read_savepoint(str(path)).positions == {T0: 10, T1: 20}
    assert sorted(os.listdir(path.parent)) == ["sp.json"]


def test_writes_through_pyarrow_uris(tmp_path):
    uri = f"file://{tmp_path}/sp.json"
    write_savepoint(_sp(), uri)
    assert read_savepoint(uri).positions == {T0: 10, T1: 20}


@pytest.mark.parametrize("content, match", [
    (None, "does not exist"),
    ("not json", "not JSON"),
    ('{"positions": {}}', "is not a txkafka savepoint"),
    ('{"format": "txkafka-savepoint", "version": "1"}', "format version '1', not a positive"),
    ('{"format": "txkafka-savepoint"}', "no format version"),
    ('{"format": "txkafka-savepoint", "version": 1, "positions": {"t": 5}}', "damaged"),
])
def test_unreadable_files_are_named(tmp_path, content, match):
    path = tmp_path / "sp.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(KafkaConfigError, match=match) as exc:
        read_savepoint(str(path), error=KafkaConfigError, name="option 'savepoint'")
    assert "option 'savepoint'" in str(exc.value) and str(path) in str(exc.value)


def test_show_prints_it(tmp_path, capsys):
    path = tmp_path / "sp.json"
    write_savepoint(_sp(), str(path))
    assert main(["savepoint", "show", str(path)]) == 0
    assert "t  0:10 1:20" in capsys.readouterr().out
    assert main(["savepoint", "show", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["positions"] == {"t": {"0": 10, "1": 20}}
    with pytest.raises(SystemExit, match="does not exist"):
        main(["savepoint", "show", str(tmp_path / "nope.json")])


# ------------------------------------------------------------------------ the position

def _entry(*lines: str, batch: int = 4) -> OffsetLogEntry:
    return OffsetLogEntry(batch, {}, tuple(lines))


def test_the_newest_committed_batch_is_spark_s_or_the_sink_s():
    assert committed_batch(None, None) == (None, BASIS_NONE)
    assert committed_batch(4, None) == (4, BASIS_SPARK)
    assert committed_batch(4, 4) == (4, BASIS_SPARK)
    assert committed_batch(4, 5) == (5, BASIS_SINK)   # the sink committed; Spark did not record it
    assert committed_batch(7, 5) == (7, BASIS_SPARK)  # batches 6-7 wrote nothing
    assert committed_batch(None, 0) == (0, BASIS_SINK)


def test_sources_are_recorded_one_by_one_and_batch_0_gives_its_start():
    start = {"t": {"0": 3}}
    entry = _entry(json.dumps({"t": {"0": 9}, BATCH_START_KEY: start}), '{"logOffset":2}',
                   '{"u":{"0":5,"1":6}}', "-")
    ends, notes = sources_of(entry, batch_start=False)
    assert [s.kind for s in ends] == [KIND_KAFKA, KIND_OTHER, KIND_KAFKA, KIND_OTHER]
    assert ends[0].positions == {T0: 9} and ends[2].positions == {("u", 0): 5, ("u", 1): 6}
    assert ends[1].raw == '{"logOffset":2}' and "source #1 is not a Kafka source" in notes[0]
    starts, notes = sources_of(entry, batch_start=True)
    assert starts[0].positions == {T0: 3}
    assert starts[2].positions == {} and any("source #2: batch 0 carries no resolved start" in n
                                             for n in notes)


def test_sources_merge_per_topic_when_they_agree():
    a = SourcePosition(0, KIND_KAFKA, {T0: 5, ("u", 0): 1})
    b = SourcePosition(1, KIND_KAFKA, {T1: 7, ("u", 0): 1})
    c = SourcePosition(2, KIND_KAFKA, {("v", 0): 3})
    d = SourcePosition(3, KIND_KAFKA, {("v", 0): 4})
    merged, conflicts = merge_sources([a, b, c, d, SourcePosition(4, KIND_OTHER, {}, "7")])
    assert merged == {T0: 5, T1: 7, ("u", 0): 1}
    assert conflicts == {"v": {2: {("v", 0): 3}, 3: {("v", 0): 4}}}


# ------------------------------------------------------------------ create: the refusals

class StableFake(FakeCoordinator):
    """FakeCoordinator with fixed transaction start times (two snapshots compare equal)."""

    def __init__(self) -> None:
        super().__init__()
        # Taken per test, not at import: the 60 s timeout below must not run out while a long
        # unit run on a loaded machine reaches this file.
        self.started_ms = int(time.time() * 1000)

    def describe(self, ids, fresh=False):
        return {tid: TransactionDescription(tid, 0, t["state"], 60000, self.started_ms, t["pid"],
                                            t["epoch"], t.get("parts") or {"out": [0]})
                for tid in ids if (t := self.txns.get(tid))}


def _spark(ck, batch, line, committed=True):
    write_metadata(ck)
    write_offsets(ck, batch, line)
    write_commits(ck, *([batch] if committed else []))


def _create(ck, fake, out=None, **kw):
    out = out or ck.parent / "sp.json"
    kw.setdefault("quiet_period_s", 0)
    create(str(ck), str(out), {"bootstrap.servers": "h:1"}, client=fake,
           watermarks=kw.pop("watermarks", lambda tps: {}), **kw)
    return read_savepoint(str(out))


@pytest.fixture
def ck(tmp_path):
    return tmp_path / "ck"


def test_refuses_a_checkpoint_without_a_txkafka_sink(ck):
    _spark(ck, 0, '{"t":{"0":5}}')
    with pytest.raises(SavepointError, match="no exactly-once txkafka sink there") as exc:
        _create(ck, StableFake())
    assert "sink.json does not exist" in str(exc.value)
    assert not (ck / "txkafka-sink").exists()  # never creates one
    with pytest.raises(SystemExit, match="no exactly-once txkafka sink"):
        main(["savepoint", "create", "--checkpoint", str(ck), "--out", str(ck.parent / "x.json"),
              "-b", "127.0.0.1:1"])


def test_refuses_a_checkpoint_without_kafka_offsets(ck):
    fake = StableFake()
    _committer(ck, fake)
    _spark(ck, 0, '{"logOffset":0}')
    with pytest.raises(SavepointError, match="no source of this query logs Kafka offsets"):
        _create(ck, fake)


def test_refuses_an_existing_output_before_doing_anything(ck, tmp_path):
    fake = StableFake()
    committer, ids, log = _committer(ck, fake)
    _spark(ck, 1, '{"t":{"0":5}}', committed=False)
    _decide_then_crash(ck, fake, 1, [0])
    (tmp_path / "sp.json").write_text("{}")
    with pytest.raises(SavepointError, match="exists already"):
        _create(ck, fake)
    assert log.latest().pending is not None  # not rolled forward: nothing was changed


def test_refuses_a_query_that_moves_and_says_what_moved(ck):
    fake = StableFake()
    _committer(ck, fake)
    _spark(ck, 0, '{"t":{"0":5}}')

    def live_query_runs(_seconds):
        _spark(ck, 1, '{"t":{"0":9}}', committed=False)

    with pytest.raises(SavepointError, match="the query still looks alive") as exc:
        _create(ck, fake, quiet_period_s=2, sleep=live_query_runs)
    assert "offsets/1 appeared" in str(exc.value) and "--quiet-period 0" in str(exc.value)
    assert not (ck.parent / "sp.json").exists()


def test_a_quiet_dead_query_with_open_transactions_passes(ck):
    fake = StableFake()
    committer, ids, log = _committer(ck, fake)
    _spark(ck, 0, '{"t":{"0":5}}')
    _spark(ck, 1, '{"t":{"0":9}}', committed=False)
    _results(ids, fake, 1, [0, 1])  # the dead run's open transactions (no decision)
    naps = []
    sp = _create(ck, fake, quiet_period_s=3, sleep=naps.append,
                 watermarks=lambda tps: {tp: 42 for tp in tps})
    assert naps == [3]
    assert sp.batch_id == 0 and sp.positions == {T0: 5}
    assert sp.resolved == {"orphans_aborted": 2}
    assert all(t["state"] == "CompleteAbort" for t in fake.txns.values())


def test_movement_rules():
    ongoing = TxnView("Ongoing", 7, 1, 1000, frozenset({("out", 0)}))
    quiet = Snapshot({"offsets/3": (10, 1)}, {"a": ongoing}, {("out", 0): 50})
    assert movements(quiet, quiet) == []
    # The coordinator aborting a dead run's transaction at its timeout is not a live query.
    timed_out = Snapshot(quiet.files, {"a": TxnView("CompleteAbort", 7)}, {})
    assert movements(quiet, timed_out) == []
    cases = {
        "commits/3 appeared": Snapshot({**quiet.files, "commits/3": (5, 2)}, quiet.txns,
                                       quiet.watermarks),
        "offsets/3 changed": Snapshot({"offsets/3": (11, 2)}, quiet.txns, quiet.watermarks),
        "transaction b appeared": Snapshot(quiet.files, {**quiet.txns, "b": ongoing},
                                           quiet.watermarks),
        "transaction a began": Snapshot(quiet.files, {"a": TxnView("Ongoing", 7, 2, 5000,
                                                                   ongoing.partitions)},
                                        quiet.watermarks),
        "transaction a committed": Snapshot(quiet.files, {"a": TxnView("CompleteCommit", 7)}, {}),
        "transaction a added partitions out-1": Snapshot(
            quiet.files, {"a": TxnView("Ongoing", 7, 1, 1000, frozenset({("out", 0), ("out", 1)}))},
            quiet.watermarks),
        "records were written to out-0 (log end 50 -> 60) while the sink's transaction a":
            Snapshot(quiet.files, quiet.txns, {("out", 0): 60}),
    }
    for expected, after in cases.items():
        moved = movements(quiet, after)
        assert any(m.startswith(expected) for m in moved), (expected, moved)


def test_refuses_an_unknown_outcome_and_writes_nothing(ck):
    fake = StableFake()
    _committer(ck, fake)
    _spark(ck, 4, '{"t":{"0":5}}')
    _spark(ck, 5, '{"t":{"0":9}}', committed=False)
    ids, log, (t0,) = _decide_then_crash(ck, fake, 5, [0])
    fake.forgotten[t0.transactional_id] = INVALID_PRODUCER_ID_MAPPING
    with pytest.raises(SavepointError, match="the output's content is not known") as exc:
        _create(ck, fake)
    assert "commit-log resolve" in str(exc.value) and t0.transactional_id in str(exc.value)
    assert not (ck.parent / "sp.json").exists()
    assert log.latest().pending is not None


def test_refuses_lost_partitions_awaiting_a_re_run(ck):
    fake = StableFake()
    _committer(ck, fake)
    _spark(ck, 4, '{"t":{"0":5}}')
    _spark(ck, 5, '{"t":{"0":9}}', committed=False)
    ids, log, (t0, t1) = _decide_then_crash(ck, fake, 5, [0, 1])
    # the broker aborted it at its timeout: epoch bumped, abort state (what confirms "lost")
    fake.txns[t1.transactional_id].update(epoch=t1.producer_epoch + 1, state="CompleteAbort")
    with pytest.raises(SavepointError, match="batch 5 .* is partly in the output") as exc:
        _create(ck, fake)
    assert "Restart the original query" in str(exc.value) and "task partition 1" in str(exc.value)
    assert not (ck.parent / "sp.json").exists()


# ----------------------------------------------------------------- create: the positions

def test_a_decided_round_is_rolled_forward_and_its_batch_is_the_position(ck):
    fake = StableFake()
    _committer(ck, fake)
    _spark(ck, 4, '{"t":{"0":5,"1":6}}')
    _spark(ck, 5, '{"t":{"0":9,"1":12}}', committed=False)
    ids, log, txns = _decide_then_crash(ck, fake, 5, [0, 1])
    sp = _create(ck, fake)
    assert (sp.batch_id, sp.basis) == (5, BASIS_SINK)
    assert sp.positions == {T0: 9, T1: 12}
    assert sp.resolved == {"orphans_aborted": 0, "rolled_forward_batch": 5}
    assert log.latest().complete
    assert all(fake.txns[c.transactional_id]["state"] == "CompleteCommit" for c in txns)
    assert sp.origin["query_id"] == "query-1" and sp.origin["sink_id"] == ids.sink_id
    assert sp.origin["checkpoint"] == str(ck)


def test_a_rolled_back_checkpoint_gives_the_positions_the_sink_committed(ck):
    """Found while building the chaos campaign's rollback step: after a CheckpointMismatchError
    (offsets/N and commits/N removed, batch N re-planned with other offsets), Spark's offsets/N
    no longer says what the sink committed for N; the savepoint took it and skipped records."""
    fake = StableFake()
    committer, ids, log = _committer(ck, fake)
    _spark(ck, 4, '{"t":{"0":5,"1":6}}')
    _spark(ck, 5, '{"t":{"0":9,"1":12}}', committed=False)
    committer.commit(5, _results(ids, fake, 5, [0, 1]))
    assert log.batch_state(5).complete
    _spark(ck, 5, '{"t":{"0":15,"1":20}}', committed=False)  # re-planned, refused by the sink
    sp = _create(ck, fake)
    assert (sp.batch_id, sp.basis, sp.positions) == (5, BASIS_SINK, {T0: 9, T1: 12})
    assert "reads other offsets than the sink committed for batch 5" in sp.notes[0]
    (ck / "offsets" / "5").unlink()  # removed, not re-planned
    assert _create(ck, fake, out=ck.parent / "sp2.json").positions == {T0: 9, T1: 12}


def test_a_batch_spark_committed_after_the_sink_s_last_data_batch(ck):
    fake = StableFake()
    committer, ids, log = _committer(ck, fake)
    committer.commit(2, _results(ids, fake, 2, [0]))
    for b, line in enumerate(['{"t":{"0":1}}', '{"t":{"0":2}}', '{"t":{"0":3}}', '{"t":{"0":4}}']):
        _spark(ck, b, line)
    _spark(ck, 4, '{"t":{"0":8}}', committed=False)  # planned, written nothing yet
    sp = _create(ck, fake)
    assert (sp.batch_id, sp.basis, sp.positions) == (3, BASIS_SPARK, {T0: 4})


def test_a_query_that_committed_nothing_starts_where_batch_0_started(ck):
    fake = StableFake()
    committer, ids, log = _committer(ck, fake)
    _spark(ck, 0, json.dumps({"t": {"0": 90, "1": 80}, BATCH_START_KEY: {"t": {"0": 40, "1": 30}}}),
           committed=False)
    _results(ids, fake, 0, [0])
    sp = _create(ck, fake)
    assert (sp.batch_id, sp.basis) == (None, BASIS_BATCH_0)
    assert sp.positions == {T0: 40, T1: 30}
    assert sp.resolved == {"orphans_aborted": 1}
    assert "start of batch 0" in sp.text("sp")


def test_a_checkpoint_without_any_batch_gives_an_empty_savepoint(ck):
    fake = StableFake()
    _committer(ck, fake)
    _spark(ck, 0, "{}")
    os.remove(ck / "offsets" / "0")
    os.remove(ck / "commits" / "0")
    sp = _create(ck, fake)
    assert (sp.basis, sp.positions, sp.sources) == (BASIS_NONE, {}, ())


def test_a_union_is_recorded_source_by_source(ck):
    fake = StableFake()
    _committer(ck, fake)
    _spark(ck, 2, '{"a":{"0":5}}\n{"b":{"0":7,"1":8}}')
    sp = _create(ck, fake)
    assert sp.positions == {("a", 0): 5, ("b", 0): 7, ("b", 1): 8}
    assert [s.positions for s in sp.sources] == [{("a", 0): 5}, {("b", 0): 7, ("b", 1): 8}]


# -------------------------------------------------------------------- the reader option

def _options(**opts):
    return parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **opts},
                                streaming=True)


def test_option_parsing():
    o = _options(savepoint=" /sp.json ", savepointSource="1")
    assert (o.savepoint, o.savepoint_source) == ("/sp.json", 1)
    assert _options().savepoint is None
    with pytest.raises(KafkaConfigError, match="option 'savepoint' is empty"):
        _options(savepoint=" ")
    with pytest.raises(KafkaConfigError, match="'savepointSource' needs option 'savepoint'"):
        _options(savepointSource="0")
    with pytest.raises(KafkaConfigError, match="'savepointSource' must be >= 0"):
        _options(savepoint="/sp", savepointSource="-1")


def test_a_savepoint_of_other_topics_is_an_error_naming_both():
    sp = _sp(positions={("orders", 0): 5})
    with pytest.raises(KafkaConfigError) as exc:
        savepoint_start(sp, _options(savepoint="/sp.json", subscribe="payments,refunds"),
                        [("payments", 0)])
    msg = str(exc.value)
    assert "topics orders" in msg and "subscribe=payments,refunds" in msg and "/sp.json" in msg
    for strategy in ({"subscribePattern": "pay.*"}, {"assign": '{"payments":[0]}'}):
        opts = parse_source_options({"kafka.bootstrap.servers": "h:1", "savepoint": "/sp",
                                     **strategy}, streaming=True)
        with pytest.raises(KafkaConfigError, match="none of which this source reads"):
            savepoint_start(sp, opts, [("payments", 0)])


def test_unknown_partitions_start_at_earliest_unless_starting_offsets_says():
    start, warnings = savepoint_start(_sp(positions={T0: 10, ("t", 5): 3}),
                                      _options(savepoint="/sp"), [T0, T1])
    assert start == {T0: 10}
    assert any("t-5@3 do not exist any more" in w for w in warnings)
    assert any("no position for 1 partition(s) (t-1): they start at their earliest" in w
               for w in warnings)
    _, warnings = savepoint_start(_sp(positions={T0: 10}),
                                  _options(savepoint="/sp", startingOffsets="latest"), [T0, T1])
    assert any("(t-1): they start where startingOffsets says" in w for w in warnings)


def test_a_topic_read_at_two_positions_needs_savepoint_source():
    sp = _sp(positions={}, conflicts={"t": {0: {T0: 5}, 1: {T0: 9}}},
             sources=(SourcePosition(0, KIND_KAFKA, {T0: 5}), SourcePosition(1, KIND_KAFKA, {T0: 9}),
                      SourcePosition(2, KIND_OTHER, {}, "3")))
    with pytest.raises(KafkaConfigError, match="Set option 'savepointSource'"):
        savepoint_start(sp, _options(savepoint="/sp"), [T0])
    assert savepoint_start(sp, _options(savepoint="/sp", savepointSource="1"), [T0])[0] == {T0: 9}
    with pytest.raises(KafkaConfigError, match="source #2 .* is not a Kafka source"):
        savepoint_start(sp, _options(savepoint="/sp", savepointSource="2"), [T0])
    with pytest.raises(KafkaConfigError, match="source #7 .* is not there"):
        savepoint_start(sp, _options(savepoint="/sp", savepointSource="7"), [T0])


def test_an_empty_savepoint_leaves_everything_to_starting_offsets():
    start, warnings = savepoint_start(_sp(positions={}, sources=(), basis=BASIS_NONE),
                                      _options(savepoint="/sp"), [T0])
    assert start == {} and "holds no position" in warnings[0]


def _fake_reader(logs, **opts):
    fake = FakeLogs(logs)
    return fake, _options(**opts)


def test_the_savepoint_wins_for_its_partitions_and_starting_offsets_covers_the_rest(tmp_path):
    path = str(tmp_path / "sp.json")
    write_savepoint(_sp(positions={T0: 10}), path)
    fake, opts = _fake_reader({T0: (0, 50), T1: (4, 60)}, savepoint=path, startingOffsets="earliest")
    assert starting_offsets(fake, opts, [T0, T1]) == ({T0: 10, T1: 4}, {T1})
    # A partition grown since: the old query would have read it from its start, so the new one
    # does too (a stream's default, latest, would skip what was written to it meanwhile).
    fake, opts = _fake_reader({T0: (0, 50), T1: (4, 60)}, savepoint=path)
    assert starting_offsets(fake, opts, [T0, T1]) == ({T0: 10, T1: 4}, {T1})
    fake, opts = _fake_reader({T0: (0, 50), T1: (4, 60)}, savepoint=path, startingOffsets="latest")
    assert starting_offsets(fake, opts, [T0, T1]) == ({T0: 10, T1: 60}, set())
    fake, opts = _fake_reader({T0: (0, 50), T1: (4, 60)}, savepoint=path,
                              startingOffsets='{"t":{"1":7}}')
    assert starting_offsets(fake, opts, [T0, T1]) == ({T0: 10, T1: 7}, set())
    fake, opts = _fake_reader({T0: (0, 50), T1: (4, 60)}, savepoint=path,
                              startingOffsets='{"t":{"0":7,"1":7}}')
    with pytest.raises(KafkaConfigError, match="both set the start of t-0"):
        starting_offsets(fake, opts, [T0, T1])


def test_a_savepoint_past_the_log_end_is_refused(tmp_path):
    path = str(tmp_path / "sp.json")
    write_savepoint(_sp(positions={T0: 80}), path)
    fake, opts = _fake_reader({T0: (0, 50)}, savepoint=path)
    with pytest.raises(KafkaConfigError, match="option 'savepoint': topic 't' partition 0 starts "
                                               "at 80, past its end offset 50 .*another cluster"):
        starting_offsets(fake, opts, [T0])


def test_a_new_stream_starts_at_the_savepoint_and_batch_0_carries_it(tmp_path):
    path = str(tmp_path / "sp.json")
    write_savepoint(_sp(positions={T0: 10, T1: 20}), path)
    logs = {T0: (0, 30), T1: (0, 25)}
    s, _ = stream(logs, savepoint=path)  # startingOffsets: latest by default
    start = s.initialOffset()
    end = logged(s.latestOffset(start, ReadAllAvailable()))
    assert end == {"t": {"0": 30, "1": 25}, BATCH_START_KEY: {"t": {"0": 10, "1": 20}}}
    assert ranges(s.partitions(start, end)) == [(0, 10, 30), (1, 20, 25)]
    # A restart that replays batch 0 reads the same ranges without the file.
    os.remove(path)
    again, _ = stream(logs, savepoint=path)
    assert ranges(again.partitions(again.initialOffset(), end)) == [(0, 10, 30), (1, 20, 25)]


def test_a_batch_read_starts_at_the_savepoint(tmp_path, monkeypatch):
    from python_datasource.kafka_reader import KafkaBatchReader

    path = str(tmp_path / "sp.json")
    write_savepoint(_sp(positions={T0: 10}), path)
    r = KafkaBatchReader({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "savepoint": path},
                         None)
    r._offset_reader = FakeLogs({T0: (0, 30), T1: (2, 5)})
    assert ranges(r.partitions()) == [(0, 10, 30), (1, 2, 5)]
