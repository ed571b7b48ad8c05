"""The producer's InitProducerId budget (commitTimeoutMs) is cut to the link's TransactionClient
timeout (30 s; 1 s here) while FindCoordinator answers COORDINATOR_NOT_AVAILABLE: the
TransactionError of find_coordinators escapes _init_producer_id's retry loop."""
import time
from tests.test_coordinator_client_failures import FakeBroker
from txkafka.connector.client.producer import ClusterLink, WireProducer, INIT_PRODUCER_ID
from txkafka.connector.client.protocol import Writer

b = FakeBroker()
start = time.monotonic()
UNTIL = 2.0  # the coordinator partition is leaderless this long

def find(n, body):
    body.int8()
    keys = body.array(lambda r: r.string())
    err = 15 if time.monotonic() - start < UNTIL else 0
    return Writer(True).int32(0).array(keys, lambda w, k: w.string(k).int32(1).string("127.0.0.1")
                                       .int32(b.port).int16(err).string(None).tags()).tags().build()

b.handlers[10] = find
b.handlers[22] = lambda n, body: Writer(True).int32(0).int16(0).int64(77).int16(3).tags().build()
link = ClusterLink({"bootstrap.servers": f"127.0.0.1:{b.port}"}, timeout_s=1.0)
p = WireProducer({"bootstrap.servers": f"127.0.0.1:{b.port}"}, transactional_id="t", link=link,
                 timeout_s=10.0)
try:
    print("begin ->", p.begin(), f"after {time.monotonic() - start:.1f}s")
except Exception as e:
    print(f"FAILED after {time.monotonic() - start:.1f}s of a 10s budget:", type(e).__name__, e)
link.close(); b.close()
