"""txkafka through Spark Connect: a local Connect server with txkafka installed on its Python, and a
Connect client that runs an exactly-once stream, a batch read and a batch write through it.

One driver process hosts both, the way ``SparkSession.builder.remote("local[2]")`` does (a regular
Spark session with the Connect plugin, then a client over gRPC), except that the server binds a free
port instead of 15002, so a run never collides with another Connect server on the machine. The
three scenarios share that one server; each test checks one of them against the broker.
"""

from __future__ import annotations

import json

import pytest

from integration_tests.kafka_helpers import KafkaTarget, unique
from integration_tests.pipeline_helpers import PipelineTopics, assert_exactly_once, make_input
from integration_tests.spark_driver import DriverProcess
from txkafka.connector.sink.commit_log import SinkCommitLog

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

BATCH_WRITE_ROWS = 300
BATCH_READ_ROWS = 120
DRIVER_TIMEOUT_S = 600

DRIVER = r"""
import json, sys, time
from pyspark.sql.connect.session import SparkSession as ConnectSession
from txkafka.spark_session import session_builder

cfg = json.loads(sys.argv[1])
boot = cfg["bootstrap"]
server = session_builder("txkafka-connect-server", conf={
    "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.connect.grpc.binding.port": "0",
    # what pyspark sets for its own local Connect server (remote("local[...]"))
    "spark.sql.artifact.isolation.enabled": "true",
    "spark.sql.artifact.isolation.alwaysApplyClassloader": "true",
}).getOrCreate()
server.sparkContext.setLogLevel("WARN")
service = getattr(server._jvm, "org.apache.spark.sql.connect.service.SparkConnectService$")
port = getattr(service, "MODULE$").localPort()
spark = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
result = {"session": type(spark).__module__}
# the monitoring listener, in the Connect client's Python (a client-side listener)
from txkafka.monitoring import TxKafkaListener
listener = TxKafkaListener([cfg["checkpoint"]], sink_batches=50)
spark.streams.addListener(listener)

# batch write
(spark.range(cfg["write_rows"]).repartition(2)
 .selectExpr("CAST(id AS STRING) AS key", "concat('w-', CAST(id AS STRING)) AS value")
 .write.format("txkafka").option("kafka.bootstrap.servers", boot)
 .option("topic", cfg["write_topic"]).option("transactionalIdPrefix", cfg["write_prefix"])
 .mode("append").save())

# batch read
rows = (spark.read.format("txkafka").option("kafka.bootstrap.servers", boot)
        .option("subscribe", cfg["read_topic"]).option("startingOffsets", "earliest")
        .option("endingOffsets", "latest").load()
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "partition",
                    "offset").collect())
result["read"] = sorted([r.partition, r.offset, r.k, r.v] for r in rows)

# exactly-once stream, stopped after a data batch and restarted from its checkpoint
def stream(**trigger):
    src = (spark.readStream.format("txkafka").option("kafka.bootstrap.servers", boot)
           .option("subscribe", cfg["stream_in"]).option("startingOffsets", "earliest")
           .option("maxOffsetsPerTrigger", "400").load())
    return (src.selectExpr("key", "concat(CAST(value AS STRING), '|seen') AS value")
            .writeStream.format("txkafka").option("kafka.bootstrap.servers", boot)
            .option("topic", cfg["stream_out"]).option("checkpointLocation", cfg["checkpoint"])
            .trigger(**trigger).start())

def data_batches(q):
    # numInputRows can be missing from the progress a Connect client receives (None).
    return [p.batchId for p in q.recentProgress if (p.numInputRows or 0) > 0]

q = stream(processingTime="300 milliseconds")
deadline = time.monotonic() + 300
while len(data_batches(q)) < 2 and time.monotonic() < deadline:
    if q.exception() is not None:
        raise SystemExit(f"first run failed: {q.exception()}")
    time.sleep(0.3)
result["first_run_batches"] = data_batches(q)
q.stop()
q = stream(availableNow=True)
q.awaitTermination(300)
if q.exception() is not None:
    raise SystemExit(f"second run failed: {q.exception()}")
result["second_run_batches"] = data_batches(q)
deadline = time.monotonic() + 30  # the client receives the last events asynchronously
while time.monotonic() < deadline and not any(
        f.batch_id == q.lastProgress.batchId for f in listener.queries().values()):
    time.sleep(0.2)
result["listener"] = listener.to_json()
print("RESULT " + json.dumps(result), flush=True)
spark.stop()
server.stop()
"""


class ConnectRun:
    def __init__(self, result: dict, stream: PipelineTopics, checkpoint: str, write_topic: str,
                 write_prefix: str, read_records: list) -> None:
        self.result = result
        self.stream = stream
        self.checkpoint = checkpoint
        self.write_topic = write_topic
        self.write_prefix = write_prefix
        self.read_records = read_records


@pytest.fixture(scope="module")
def connect_run(kafka: KafkaTarget, tmp_path_factory) -> ConnectRun:
    """The three scenarios through one Connect server, in one driver process."""
    stream = make_input(kafka, records=1500, per_txn=250)
    read_topic = kafka.create_topic(partitions=2)
    kafka.produce(read_topic, [(f"r{i}", f"read-{i}") for i in range(BATCH_READ_ROWS)])
    read_records = kafka.read_all(read_topic)
    write_topic = kafka.create_topic(partitions=2)
    checkpoint = str(tmp_path_factory.mktemp("connect") / "checkpoint")
    cfg = {"bootstrap": kafka.bootstrap, "write_rows": BATCH_WRITE_ROWS, "write_topic": write_topic,
           "write_prefix": unique("connect-w"), "read_topic": read_topic,
           "stream_in": stream.source, "stream_out": stream.sink, "checkpoint": checkpoint}
    proc = DriverProcess("-c", [DRIVER, json.dumps(cfg)]).start()
    try:
        code = proc.wait(DRIVER_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - a hung driver: fail with its log
        pytest.fail(f"the Connect driver did not finish in {DRIVER_TIMEOUT_S}s:\n{proc.tail()}")
    finally:
        proc.kill()
    out = proc.output()
    assert code == 0 and "RESULT " in out, f"exit {code}:\n{proc.tail(80)}"
    result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    assert result["session"] == "pyspark.sql.connect.session", result  # a Connect client, not classic
    return ConnectRun(result, stream, checkpoint, write_topic, cfg["write_prefix"], read_records)


def test_exactly_once_stream_through_connect_with_a_restart(connect_run, kafka):
    r = connect_run.result
    assert len(r["first_run_batches"]) >= 2 and r["second_run_batches"], r
    assert_exactly_once(kafka, connect_run.stream, connect_run.checkpoint)


def test_the_monitoring_listener_runs_in_the_connect_client(connect_run):
    """Lag from the progress events a Connect client receives; the sink's figures from the
    checkpoint, matching its commit log."""
    r = connect_run.result
    [seen] = r["listener"].values()
    assert seen["lag"] is not None and seen["lag"]["recordsBehindLatest"] == 0, seen
    assert seen["lag"]["partitions"] and seen["lag_history"], seen
    log = SinkCommitLog(connect_run.checkpoint)
    records = sum(log.batch_state(b).last.outcome["records"] for b in log.batch_ids())
    assert seen["sink_totals"]["records"] == records == connect_run.stream.expected_ids, seen


def test_batch_read_through_connect(connect_run):
    expected = sorted([rec.partition, rec.offset, rec.key.decode(), rec.value.decode()]
                      for rec in connect_run.read_records)
    assert len(expected) == BATCH_READ_ROWS
    assert connect_run.result["read"] == expected


def test_batch_write_through_connect(connect_run, kafka):
    got = sorted((rec.key.decode(), rec.value.decode())
                 for rec in kafka.read_all(connect_run.write_topic))
    assert got == sorted((str(i), f"w-{i}") for i in range(BATCH_WRITE_ROWS))
    assert kafka.open_transactions(connect_run.write_prefix) == []
