"""Correlation ids past 2**31-1: the Java client and librdkafka wrap; txkafka raises struct.error."""
import struct
from tests.test_coordinator_client_failures import FakeBroker, _end_txn_on
from txkafka.connector.client.connection import BrokerConnection, SecurityConfig

b = FakeBroker()
conn = BrokerConnection("127.0.0.1", b.port, SecurityConfig())
conn.connect()
conn._correlation = 2**31 - 2
print("ok", _end_txn_on(conn, "t"))
try:
    print(_end_txn_on(conn, "t"))
except Exception as e:
    print("ERROR", type(e).__mro__, e)
b.close()
