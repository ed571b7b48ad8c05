"""A streaming task that does not know its micro-batch must not guess batch 0.

With the sink's log at batch 5, a guessed batch 0 makes should_write() answer "already written"
and the task would drop its rows while reporting success.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from txkafka.connector.errors import TransactionError
from txkafka.connector.sink.committer import WritePlan
from txkafka.connector.sink.task_writer import validate_input_schema
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.sink.transactional_ids import TransactionalIdFactory
from txkafka.python_datasource import kafka_writer as adapter

BASE = {"kafka.bootstrap.servers": "h:9092", "topic": "out", "checkpointLocation": "/tmp/x"}


def _write_object(options: dict, streaming: bool):
    """The object Spark pickles to the tasks, built without the driver-side start checks."""
    cls = adapter.KafkaStreamingWrite if streaming else adapter.KafkaBatchWrite
    w = cls.__new__(cls)
    w.cfg = SinkConfig.from_options({**BASE, **options}, streaming=streaming)
    w.streaming = streaming
    w.sink_schema = validate_input_schema({"value": "binary"}, w.cfg.topic)
    w.plan = WritePlan(5, True, frozenset())  # the log's newest batch, complete
    w.ids = TransactionalIdFactory("txkafka", "ab12cd34")
    w._committer = None
    w.planned_at = 0.0
    return w


def _rows():
    yield pa.RecordBatch.from_pydict({"value": pa.array([b"a"])})


def test_streaming_task_without_a_batch_id_fails_instead_of_dropping_rows(monkeypatch):
    monkeypatch.setattr(adapter, "_task_context", lambda: adapter._TaskInfo(3, 1, None))
    with pytest.raises(TransactionError, match=r"task partition 3 attempt 1: .*streaming\.sql\.batchId"):
        _write_object({}, streaming=True).write(_rows())


@pytest.mark.parametrize("inherited", [None, 7])
def test_a_batch_write_is_batch_0(monkeypatch, inherited):
    # 7: a df.write inside foreachBatch, whose tasks inherit the stream's streaming.sql.batchId;
    # the batch write's commit checks batch 0.
    monkeypatch.setattr(adapter, "_task_context", lambda: adapter._TaskInfo(3, 0, inherited))
    w = _write_object({}, streaming=False)
    w.plan = WritePlan()
    written = []
    for writer in ("KafkaWriter", "WireKafkaWriter"):  # whichever producer the config picked
        monkeypatch.setattr(adapter, writer, lambda cfg, schema, **kw: written.append(kw)
                            or _NoopWriter())
    msg = w.write(_rows())
    assert msg.result.batch_id == 0 and written[0]["batch_id"] == 0


class _NoopWriter:
    count = 0
    late = False

    def write(self, iterator):
        return None

    def release(self):
        pass


@pytest.mark.parametrize("streaming, names", [(True, "outputMode('append')"),
                                              (False, "mode('append')")])
def test_an_overwriting_mode_is_refused_naming_the_call_that_appends(streaming, names):
    # Spark hands overwrite=True for a stream's complete output mode and df.write's overwrite.
    from pyspark.sql.types import BinaryType, StructField, StructType

    from txkafka.connector.errors import KafkaConfigError

    cls = adapter.KafkaStreamingWrite if streaming else adapter.KafkaBatchWrite
    schema = StructType([StructField("value", BinaryType())])
    with pytest.raises(KafkaConfigError, match=r"appends to Kafka topics") as exc:
        cls(BASE, schema, True)
    assert names in str(exc.value) and ("complete" in str(exc.value)) == streaming


def test_a_streaming_commit_counts_the_batch_s_age_from_its_planning(monkeypatch):
    """Spark plans a micro-batch with one writer (pickled to the tasks) and commits it with
    another it creates just before commit (pyspark's python_streaming_sink_runner): the commit's
    bound on a transaction's age must start at the planning, which the tasks carry back, not at
    the commit writer's creation (that bound made every transaction look a few ms old, so none
    was ever refused as about to time out)."""
    import pickle

    monkeypatch.setattr(adapter, "_task_context", lambda: adapter._TaskInfo(3, 0, 5))
    monkeypatch.setattr(adapter, "follow_up", lambda *a: None)
    for writer in ("KafkaWriter", "WireKafkaWriter"):
        monkeypatch.setattr(adapter, writer, lambda cfg, schema, **kw: _NoopWriter())
    planning = _write_object({}, streaming=True)
    planning.planned_at = 100.0  # host clock when Spark planned batch 5
    task_side = pickle.loads(pickle.dumps(planning))
    message = pickle.loads(pickle.dumps(task_side.write(_rows())))

    seen = []

    class Committer:
        planned_at = client = ids = log = None

        def commit(self, batch_id, results):
            seen.append((batch_id, self.planned_at, [r.partition_id for r in results if r]))

    commit_side = _write_object({}, streaming=True)
    commit_side.planned_at = 160.0  # created by the commit runner, a minute later
    commit_side._committer = Committer()
    commit_side._committer.planned_at = commit_side.planned_at  # as committer() makes it
    commit_side.commit([message, None], 5)
    assert seen == [(5, 100.0, [3])]
    legacy = adapter.TxKafkaCommitMessage(message.result)  # an older txkafka's task: no clock
    del legacy.planned_at
    commit_side.commit([legacy], 5)
    assert seen[-1][1] == 160.0
    message.planned_at = 170.0  # not this host's clock: after the commit writer's creation
    commit_side.commit([message], 5)
    assert seen[-1][1] == 160.0
