"""The sink's commit log lives where Spark keeps the query's checkpoint, or the query does not start."""

from types import SimpleNamespace

import pyarrow.fs as pafs
import pytest

from txkafka.connector import sink_commit_log
from txkafka.connector.errors import CommitLogError
from txkafka.connector import spark_checkpoint
from txkafka.connector.sink_commit_log import SinkCommitLog
from txkafka.connector.spark_checkpoint import checkpoint_filesystem


def test_a_checkpoint_spark_wrote_is_accepted(tmp_path):
    (tmp_path / "metadata").write_text('{"id":"5f0c"}\n')
    SinkCommitLog(str(tmp_path)).require_spark_checkpoint()
    SinkCommitLog(f"file://{tmp_path}").require_spark_checkpoint()


def test_a_path_spark_resolved_elsewhere_is_refused_with_what_to_do(tmp_path):
    # As on a cluster whose fs.defaultFS is HDFS: Spark wrote metadata there, not on local disk.
    log = SinkCommitLog(str(tmp_path / "user" / "etl" / "chk"))
    with pytest.raises(CommitLogError) as exc:
        log.require_spark_checkpoint()
    message = str(exc.value)
    assert "checkpointLocation" in message and "metadata" in message
    assert "full URI" in message and "fs.defaultFS" in message
    assert not (tmp_path / "user").exists()  # nothing created on the wrong filesystem


def test_hadoop_s3_schemes_open_pyarrows_s3(monkeypatch):
    seen = []

    def from_uri(uri):
        seen.append(uri)
        return pafs.LocalFileSystem(), "/bucket/ck"

    # (pyarrow's S3 would look for AWS credentials and a region: record the URI it is given)
    monkeypatch.setattr(spark_checkpoint, "pafs", SimpleNamespace(
        FileSystem=SimpleNamespace(from_uri=from_uri), LocalFileSystem=pafs.LocalFileSystem))
    checkpoint_filesystem("s3a://bucket/ck")
    checkpoint_filesystem("S3N://bucket/ck")
    checkpoint_filesystem("hdfs://nn:8020/ck")
    assert seen == ["s3://bucket/ck", "s3://bucket/ck", "hdfs://nn:8020/ck"]


def test_a_record_and_its_rename_are_synced_to_disk(tmp_path, monkeypatch):
    import os

    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(sink_commit_log.os, "fsync", fsync)
    log = SinkCommitLog(str(tmp_path))
    log.identity("p")
    root = str(tmp_path / "txkafka-sink")
    assert synced[0].startswith(f"{root}/.sink.json.") and synced[0].endswith(".tmp")
    assert synced[1] == root  # the directory holding the renamed record
