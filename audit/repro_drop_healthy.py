"""ClusterLink._metadata drops (closes) a healthy shared connection and marks its broker failed
when its request only waited for the connection's lock behind another thread's slow request."""
import threading, time
from tests.test_coordinator_client_failures import FakeBroker
from tests.produce_sim import metadata_answer
from txkafka.connector.client.producer import ClusterLink
from txkafka.connector.client.protocol import Writer

b = FakeBroker()
b.handlers[3] = lambda n, body: metadata_answer([(1, "127.0.0.1", b.port)], [("t", 0, {0: 1})])
def slow_init(n, body):
    time.sleep(3)
    return Writer(True).int32(0).int16(0).int64(77).int16(3).tags().build()
b.handlers[22] = slow_init
link = ClusterLink({"bootstrap.servers": f"127.0.0.1:{b.port}"})
conn = link.connection("127.0.0.1", b.port)
body = Writer(True).string("tid").int32(60000).int64(-1).int16(-1).tags().build()
t = threading.Thread(target=lambda: print("slow InitProducerId answered:",
                     conn.request(22, 4, body, flexible=True, deadline=time.monotonic() + 10) is not None))
t.start(); time.sleep(0.2)
try:
    link._metadata(["t"], link.clock() + 1.5, "writing", "1.5s")
except Exception as e:
    print("metadata:", type(e).__name__, str(e)[:200])
t.join()
print("shared connection closed:", conn.closed, "| broker marked failed:", list(link._failed))
link.close(); b.close()
