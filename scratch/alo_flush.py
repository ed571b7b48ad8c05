import time, socket, pyarrow as pa
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.sink.task_writer import KafkaWriter, validate_input_schema
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()  # nothing listens
cfg = SinkConfig.from_options({"kafka.bootstrap.servers": f"127.0.0.1:{port}", "topic": "t",
                               "deliveryGuarantee": "at_least_once", "producer": "librdkafka",
                               "kafka.message.timeout.ms": "20000",
                               "kafka.transaction.timeout.ms": "3000"}, streaming=True)
schema = validate_input_schema({"value": "binary"}, "t")
w = KafkaWriter(cfg, schema, batch_id=0, partition_id=0, attempt=0, transactional_id=None)
t = time.monotonic()
try:
    w.write([pa.record_batch([pa.array([b"x"])], names=["value"])])
    print("ok")
except Exception as e:
    print(f"{type(e).__name__} after {time.monotonic()-t:.1f}s: {e}")
