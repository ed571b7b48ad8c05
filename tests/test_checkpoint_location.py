"""The sink's commit log lives where Spark keeps the query's checkpoint, or the query does not start."""

from types import SimpleNamespace

import pyarrow.fs as pafs
import pytest

from tests.spark_checkpoint_files import write_commits, write_metadata, write_offsets
from txkafka.connector.sink import commit_log as sink_commit_log
from txkafka.connector.errors import CommitLogError
from txkafka.connector.checkpoint import spark_checkpoint
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.checkpoint.spark_checkpoint import checkpoint_filesystem


def test_a_checkpoint_spark_wrote_is_accepted(tmp_path):
    write_metadata(tmp_path, "5f0c")
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


def test_spark_checkpoint_lists_planned_and_finished_batches(tmp_path):
    write_offsets(tmp_path, 0, '{"t":{"0":5}}')
    write_offsets(tmp_path, 1, '{"t":{"0":9}}', watermark_ms=7)
    write_commits(tmp_path, 0, crc=True)
    ck = spark_checkpoint.SparkCheckpoint(f"file://{tmp_path}")
    assert ck.offsets_batch_ids() == [0, 1] and ck.committed_batch_ids() == [0]
    assert (ck.latest_offsets_batch(), ck.latest_committed_batch()) == (1, 0)
    assert ck.has_commit(0) and not ck.has_commit(1)
    assert ck.read_offsets(1).watermark_ms == 7 and ck.read_offsets(1).topic_offsets("t") == {0: 9}
    assert ck.commit_path(0) == f"{tmp_path}/commits/0"
    assert ck.offsets_path(1) == f"{tmp_path}/offsets/1"
    assert not ck.has_metadata() and ck.query_id() is None
    write_metadata(tmp_path, "q-1")
    assert ck.has_metadata() and ck.query_id() == "q-1" and ck.metadata_path == f"{tmp_path}/metadata"


def test_spark_offset_log_v2_lines_are_read_by_source_name_and_other_versions_refused(tmp_path):
    # Spark's v2 offset log (sources named with .name()): "<name>:<offset>" lines, map order.
    write_offsets(tmp_path, 0, 'payments:{"p":{"0":3}}', 'orders:{"t":{"0":9}}', "files:-",
                  version="v2", watermark_ms=5)
    entry = spark_checkpoint.SparkCheckpoint(str(tmp_path)).read_offsets(0)
    assert entry.names == ("files", "orders", "payments")
    assert entry.sources == ("-", '{"t":{"0":9}}', '{"p":{"0":3}}')
    assert entry.topic_offsets("t") == {0: 9} and entry.watermark_ms == 5
    write_offsets(tmp_path, 1, '{"t":{"0":9}}', version="v3")
    with pytest.raises(CommitLogError, match=r"offsets/1 starts with 'v3': Spark's offset log "
                                             r"formats v1 and v2 are read"):
        spark_checkpoint.SparkCheckpoint(str(tmp_path)).read_offsets(1)


def test_spark_checkpoint_of_a_query_that_never_planned_a_batch(tmp_path):
    ck = spark_checkpoint.SparkCheckpoint(str(tmp_path / "none-yet"))
    assert ck.offsets_batch_ids() == [] and ck.committed_batch_ids() == []
    assert ck.latest_offsets_batch() is None and ck.read_offsets(0) is None
