"""AddPartitionsToTxn answered UNKNOWN_TOPIC_OR_PARTITION once (the coordinator's metadata cache
has not seen the partition yet): librdkafka and Java retry it; txkafka fails the task."""
import random
from tests.produce_sim import Faults, SimCluster, SimLink
from tests.test_wire_producer_faults import _values, _to
from txkafka.connector.client.producer import WireProducer, ADD_PARTITIONS_TO_TXN
from txkafka.connector.client.protocol import Reader, Writer

cluster = SimCluster(random.Random(1), Faults(), topics={"t": 3})
real = cluster.handle_coordinator
calls = []

def lagging(api, body):
    if api == ADD_PARTITIONS_TO_TXN and not calls:
        calls.append(1)
        r = Reader(body, True); r.string(); r.int64(); r.int16()
        topics = []
        for _ in range(r.uvarint() - 1):
            name = r.string(); parts = [r.int32() for _ in range(r.uvarint() - 1)]; r.tags()
            topics.append((name, parts))
        return (Writer(True).int32(0).array(topics, lambda w, tp: w.string(tp[0]).array(
            tp[1], lambda ww, p: ww.int32(p).int16(3).tags()).tags()).tags().build())
    return real(api, body)

cluster.handle_coordinator = lagging
p = WireProducer({"bootstrap.servers": "sim:9092", "batch.size": "300"},
                 transactional_id="sim-0", link=SimLink(cluster), where="test task")
p.begin()
try:
    p.send("t", _values(0, 100), partitions=_to(0, 100))
    print("flush", p.flush())
except Exception as e:
    print("FAILED:", type(e).__name__, e)
p.close()
