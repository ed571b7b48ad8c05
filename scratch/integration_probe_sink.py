"""Throwaway audit probes (auditC); not for merge."""
from __future__ import annotations
import time
import pyarrow as pa
import pytest

from txkafka.connector.sink.committable import TaskResult
from txkafka.connector.sink.committer import KafkaCommitter
from txkafka.connector.sink.task_writer import KafkaWriter, validate_input_schema
from txkafka.connector.sink.task_writer_txkafka import WireKafkaWriter
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.sink.transactional_ids import TransactionalIdFactory

pytestmark = [pytest.mark.kafka]


def _setup(kafka, tmp_path, topic, **opts):
    options = {"kafka.bootstrap.servers": kafka.bootstrap, "checkpointLocation": str(tmp_path), **opts}
    if topic:
        options["topic"] = topic
    cfg = SinkConfig.from_options(options, streaming=True)
    log = SinkCommitLog(str(tmp_path))
    ids = TransactionalIdFactory(cfg.transactional_id_prefix, log.identity("x").sink_id)
    return cfg, log, ids, KafkaCommitter(cfg, ids, log)


@pytest.mark.parametrize("producer", ["librdkafka", "txkafka"])
def test_partition_out_of_range(kafka, tmp_path, producer):
    topic = kafka.create_topic(partitions=2)
    cfg, log, ids, committer = _setup(kafka, tmp_path, topic, producer=producer)
    batch = pa.record_batch([pa.array([b"a", b"b"]), pa.array([0, 5], pa.int32())],
                            names=["value", "partition"])
    schema = validate_input_schema({"value": "binary", "partition": "int"}, cfg.topic)
    cls = KafkaWriter if producer == "librdkafka" else WireKafkaWriter
    w = cls(cfg, schema, batch_id=0, partition_id=0, attempt=0,
            transactional_id=ids.transactional_id(0, 0))
    t = time.monotonic()
    try:
        w.write([batch])
        print("NO ERROR")
    except BaseException as e:
        print(f"ERR {producer}: {type(e).__module__}.{type(e).__name__}: {e}  ({time.monotonic()-t:.1f}s)")
    finally:
        w.release()
    time.sleep(1)
    print("open:", kafka.open_transactions(ids.sink_prefix))


@pytest.mark.parametrize("producer", ["librdkafka", "txkafka"])
def test_topic_column_empty_and_missing(kafka, tmp_path, producer):
    topic = kafka.create_topic(partitions=1)
    cfg, log, ids, committer = _setup(kafka, tmp_path, None, producer=producer,
                                      **{"kafka.message.timeout.ms": "8000"} if producer == "librdkafka" else {})
    for bad in ["", "no-such-topic-xyz"]:
        batch = pa.record_batch([pa.array([topic, bad]), pa.array([b"a", b"b"])],
                                names=["topic", "value"])
        schema = validate_input_schema({"topic": "string", "value": "binary"}, None)
        cls = KafkaWriter if producer == "librdkafka" else WireKafkaWriter
        w = cls(cfg, schema, batch_id=0, partition_id=0, attempt=0,
                transactional_id=ids.transactional_id(0, 0))
        t = time.monotonic()
        try:
            w.write([batch])
            print("NO ERROR")
        except BaseException as e:
            print(f"ERR {producer} {bad!r}: {type(e).__name__}: {e}  ({time.monotonic()-t:.1f}s)")
        finally:
            w.release()
    time.sleep(1)
    print("open:", kafka.open_transactions(ids.sink_prefix))


def test_copied_checkpoint_queries_abort_each_other(kafka, tmp_path):
    """Two queries whose checkpoints share txkafka-sink/sink.json (one copied from the other,
    e.g. a blue/green fork writing to another topic): their sweeps abort each other's
    pre-committed transactions."""
    import shutil
    from tests.test_sink_core import _spark_offsets  # noqa: F401
    from txkafka.connector.sink.transactional_ids import TransactionalIdFactory
    ta, tb = kafka.create_topic(), kafka.create_topic()
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    cfg_a, log_a, ids_a, com_a = _setup(kafka, a_dir, ta)
    shutil.copytree(a_dir, b_dir)  # the operator copies the checkpoint
    cfg_b, log_b, ids_b, com_b = _setup(kafka, b_dir, tb)
    from tests.spark_checkpoint_files import write_offsets
    for d in (a_dir, b_dir):
        (d / "metadata").write_text('{"id":"q"}')
        write_offsets(d, 0, '{"in":{"0":2}}')
    print("sink prefixes:", ids_a.sink_prefix, ids_b.sink_prefix)
    schema = validate_input_schema({"value": "binary"}, ta)
    batch = pa.record_batch([pa.array([b"x", b"y"])], names=["value"])
    # Query A's task pre-commits (run tag aaaaaa); query B's task too (run tag bbbbbb).
    wa = KafkaWriter(cfg_a, schema, batch_id=0, partition_id=0, attempt=0,
                     transactional_id=ids_a.transactional_id(0, 0, run="aaaaaa"))
    ca = wa.write([batch]); wa.release()
    wb = KafkaWriter(cfg_b, schema, batch_id=0, partition_id=0, attempt=0,
                     transactional_id=ids_b.transactional_id(0, 0, run="bbbbbb"))
    cb = wb.write([batch]); wb.release()
    # B commits its batch first: its orphan sweep takes A's open transaction for its own orphan.
    rb = com_b.commit(0, [TaskResult(0, 0, 0, cb, 2)])
    print("B report:", rb)
    try:
        ra = com_a.commit(0, [TaskResult(0, 0, 0, ca, 2)])
        print("A report:", ra)
    except Exception as e:
        print("A commit failed:", type(e).__name__, str(e)[:400])
    print("A topic committed records:", len(kafka.read_all(ta)))
