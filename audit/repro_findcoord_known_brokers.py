"""Single bootstrap broker restarting: the producer's coordinator lookup asks only the bootstrap
broker and coordinators found earlier, never the brokers the link's own Metadata named."""
import time
from tests.test_coordinator_client_failures import FakeBroker
from tests.produce_sim import metadata_answer
from txkafka.connector.client.producer import ClusterLink, WireProducer
from txkafka.connector.client.protocol import Writer

b0, b1 = FakeBroker(), FakeBroker()
for b in (b0, b1):
    b.handlers[3] = lambda n, body: metadata_answer(
        [(1, "127.0.0.1", b0.port), (2, "127.0.0.1", b1.port)], [("t", 0, {0: 2})])
    b.handlers[22] = lambda n, body: Writer(True).int32(0).int16(0).int64(77).int16(3).tags().build()
b1.coordinator = ("127.0.0.1", b1.port)  # after b0 went away, b1 coordinates every id
conf = {"bootstrap.servers": f"127.0.0.1:{b0.port}"}
link = ClusterLink(conf, timeout_s=3.0)
p = WireProducer(conf, transactional_id="a", link=link, timeout_s=3.0)
print("first begin", p.begin(), "coordinator", link.coordinators.coordinator("a"))
print("metadata brokers known to the link:", link.topic("t") and link.brokers)
b0.close()  # the bootstrap broker (and coordinator) restarts
start = time.monotonic()
p2 = WireProducer(conf, transactional_id="b", link=link, timeout_s=3.0)
try:
    print("second begin", p2.begin())
except Exception as e:
    print(f"FAILED after {time.monotonic()-start:.1f}s while broker 2 (127.0.0.1:{b1.port}) was up:",
          type(e).__name__, str(e)[:300])
link.close(); b1.close()
