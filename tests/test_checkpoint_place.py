"""A moved or copied checkpoint stops the query before anything is written.

A copy of a checkpoint carries the sink's id (txkafka-sink/sink.json): two queries on copies would
use the same transactional ids, and each one's orphan sweep would abort the other's pre-committed
transactions at every batch. The sink's log records the place it was made for (place.json); a start
anywhere else is refused naming both places, until the operator records a move
(`txkafka commit-log moved`) or starts the copy on a new checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.formats import generate
from tests.spark_checkpoint_files import write_metadata
from txkafka.cli import main
from txkafka.connector.checkpoint.spark_checkpoint import checkpoint_place
from txkafka.connector.errors import (
    CheckpointMismatchError,
    CheckpointMovedError,
    SavepointError,
)
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.savepoint import create as create_savepoint


def _started(ck: Path) -> SinkCommitLog:
    """A checkpoint whose query started once: Spark's metadata, the sink's place and identity."""
    write_metadata(ck)
    log = SinkCommitLog(str(ck))
    log.require_own_place()
    log.identity("p")
    return log


def _place_record(ck: Path) -> dict:
    return json.loads((ck / "txkafka-sink" / "place.json").read_text())


def test_the_first_start_records_the_place_and_other_spellings_of_it_pass(tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    _started(ck)
    rec = _place_record(ck)
    assert rec["place"] == f"file://{ck.resolve()}" and rec["version"] == 1
    link = tmp_path / "link"
    link.symlink_to(ck)
    monkeypatch.chdir(tmp_path)
    for spelling in (f"{ck}/", f"file:{ck}", f"file://{ck}", f"file://{ck}/", "ck", "./ck/",
                     str(link), f"{tmp_path}/other/../ck"):
        SinkCommitLog(spelling).require_own_place()
    assert _place_record(ck) == rec  # never rewritten by a start


def test_a_checkpoint_without_a_place_record_adopts_its_place(tmp_path):
    """Checkpoints of a txkafka before the record (sink.json, no place.json) keep working."""
    ck = tmp_path / "ck"
    write_metadata(ck)
    log = SinkCommitLog(str(ck))
    sink_id = log.identity("p").sink_id
    assert log.recorded_place() is None
    log.require_own_place()
    assert log.recorded_place() == f"file://{ck.resolve()}"
    assert log.identity("p").sink_id == sink_id


def test_a_copied_checkpoint_is_refused_naming_both_places_and_both_ways_on(tmp_path):
    original = tmp_path.resolve() / "a"
    sink_id = _started(original).identity("p").sink_id
    copy = tmp_path.resolve() / "b"
    shutil.copytree(original, copy)
    with pytest.raises(CheckpointMovedError) as exc:
        SinkCommitLog(str(copy)).require_own_place()
    assert isinstance(exc.value, CheckpointMismatchError)
    text = str(exc.value)
    for part in (f"recorded for the checkpoint at file://{original}, not at file://{copy}",
                 f"sink id {sink_id}", "stops before anything is written",
                 f"`txkafka commit-log moved --checkpoint {copy} --yes`",
                 "NEW checkpointLocation", f"`txkafka commit-log show --checkpoint {copy}`",
                 "savepoint", "Checkpoint moved or copied"):
        assert part in text, (part, text)
    assert _place_record(copy)["place"] == f"file://{original}"  # nothing adopted
    SinkCommitLog(str(original)).require_own_place()  # the original runs on


def test_the_moved_command_records_the_new_place_then_the_start_passes(tmp_path, capsys):
    old, new = tmp_path.resolve() / "old", tmp_path.resolve() / "new"
    _started(old)
    shutil.move(old, new)
    log = SinkCommitLog(str(new))
    with pytest.raises(CheckpointMovedError):
        log.require_own_place()
    assert main(["commit-log", "moved", "--checkpoint", str(new)]) == 0  # a dry run
    assert f"would record file://{new} " in capsys.readouterr().out
    with pytest.raises(CheckpointMovedError):
        log.require_own_place()
    assert main(["commit-log", "moved", "--checkpoint", str(new), "--yes"]) == 0
    assert f"recorded file://{new} as the place of sink" in capsys.readouterr().out
    log.require_own_place()
    assert main(["commit-log", "moved", "--checkpoint", f"{new}/", "--yes"]) == 0
    assert "already: nothing to do" in capsys.readouterr().out


def test_the_moved_command_refuses_a_copy_while_the_old_place_holds_the_sink(tmp_path, capsys):
    original, copy = tmp_path.resolve() / "a", tmp_path.resolve() / "b"
    _started(original)
    shutil.copytree(original, copy)
    with pytest.raises(SystemExit, match=f"^error: the checkpoint at file://{original} still "
                                         "holds sink .*copied, not moved"):
        main(["commit-log", "moved", "--checkpoint", str(copy), "--yes"])
    assert _place_record(copy)["place"] == f"file://{original}"
    assert main(["commit-log", "moved", "--checkpoint", str(copy), "--force", "--yes"]) == 0
    SinkCommitLog(str(copy)).require_own_place()


def test_remote_places_are_spelled_one_way_without_credentials():
    remote = object()  # any filesystem but the local disk: the URI decides
    assert checkpoint_place("s3a://key:secret@Bucket/ck//q/?region=eu", remote, "") == \
        "s3://bucket/ck/q"
    assert checkpoint_place("S3://bucket/ck/q", remote, "") == "s3://bucket/ck/q"
    assert checkpoint_place("hdfs://NN:8020/user/etl/./ck/", remote, "") == \
        "hdfs://nn:8020/user/etl/ck"
    assert checkpoint_place("hdfs://nn:8020/user/etl/ck2", remote, "") != \
        checkpoint_place("hdfs://nn:8020/user/etl/ck", remote, "")


def test_the_driver_refuses_a_copied_checkpoint_before_the_sink_acts(tmp_path, monkeypatch):
    """Spark's streamWriter() call: refused before the start checks, the sink's identity and the
    committer's recovery (which sweeps the sink's open transactions)."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from txkafka.python_datasource import kafka_writer as adapter

    acted: list[str] = []
    monkeypatch.setattr(adapter, "_CHECKPOINTS_SEEN", set())
    monkeypatch.setattr(adapter, "validate_at_start", lambda *a, **k: acted.append("checks"))
    monkeypatch.setattr(adapter, "KafkaCommitter", lambda *a, **k: acted.append("committer"))
    original, copy = tmp_path.resolve() / "a", tmp_path.resolve() / "b"
    _started(original)
    shutil.copytree(original, copy)
    schema = StructType([StructField("value", BinaryType())])

    def start(ck: Path):
        return adapter.KafkaStreamingWrite({"kafka.bootstrap.servers": "h:9092", "topic": "out",
                                            "checkpointLocation": str(ck)}, schema, False)

    with pytest.raises(CheckpointMovedError):
        start(copy)
    assert acted == []
    with pytest.raises(AttributeError):  # the stand-in committer has no plan(): it got there
        start(original)
    assert acted == ["checks", "committer"]


def test_a_savepoint_of_a_copy_is_refused_and_aborts_nothing(tmp_path):
    """Resolving a copy's sink would abort the original query's open transactions."""
    original = tmp_path.resolve() / "a"
    q = generate.Query(original)
    q.log.require_own_place()
    q.offsets(0)
    q.committer().commit(0, [q.task(0, p, "run-1") for p in (0, 1)])
    q.spark_commit(0)
    copy = tmp_path.resolve() / "b"
    shutil.copytree(original, copy)
    calls = len(q.fake.calls)
    with pytest.raises(SavepointError, match=f"recorded for the checkpoint at file://{original}; "
                                             "this one was moved or copied here"):
        create_savepoint(str(copy), str(tmp_path / "sp.json"), {"bootstrap.servers": "b:9092"},
                         client=q.fake, quiet_period_s=0)
    assert q.fake.calls[calls:] == [] and not (tmp_path / "sp.json").exists()
    create_savepoint(str(original), str(tmp_path / "sp.json"), {"bootstrap.servers": "b:9092"},
                     client=q.fake, quiet_period_s=0)


def test_aborting_by_a_copy_s_checkpoint_is_refused_before_asking_the_cluster(tmp_path):
    """A copy's transactional ids are the original's: its open transactions may be that query's."""
    original, copy = tmp_path.resolve() / "a", tmp_path.resolve() / "b"
    _started(original)
    shutil.copytree(original, copy)
    # An address nothing listens on: the refusal must come before any request.
    with pytest.raises(SystemExit, match=f"^error: --checkpoint {copy}: the sink's commit log was "
                                         f"recorded for the checkpoint at file://{original}"):
        main(["transactions", "abort", "-b", "127.0.0.1:9", "--checkpoint", str(copy), "--yes"])
