"""txkafka's own producer on the secured broker: every transport (TLS, SASL PLAIN/SCRAM), with the
writer principal's minimal ACLs; missing ACLs fail with the typed errors librdkafka's path gives."""

from __future__ import annotations

import pyarrow as pa
import pytest

from integration_tests.kafka_helpers import unique
from integration_tests.test_security_transport import TRANSPORTS, _label, reader_groups  # noqa: F401
from txkafka.connector.errors import KafkaAuthorizationError
from txkafka.connector.client.transactions import TransactionClient
from txkafka.connector.client.producer import ClusterLink, WireProducer

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("protocol, mechanism", TRANSPORTS,
                         ids=[_label(p, m) for p, m in TRANSPORTS])
def test_every_transport_writes_and_the_driver_commits(secure_kafka, reader_groups, protocol,
                                                        mechanism):
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("wsec"), partitions=2)
    prefix = unique("sink")
    sk.grant_writer("writer", topic, prefix)
    sk.grant_reader("reader", topic)
    conf = sk.client_config("writer", protocol, mechanism)
    link = ClusterLink(conf)
    values = pa.array([b"%s-%d" % (protocol.encode(), i) for i in range(50)])
    keys = pa.array([b"k%d" % i for i in range(50)])
    p = WireProducer(conf, transactional_id=f"{prefix}-p0", link=link, where="secured task")
    p.begin()
    p.send(topic, values, keys=keys)
    res = p.flush()
    p.close()
    reader = sk.target("reader", protocol, mechanism)
    assert reader.read_all(topic) == []
    with TransactionClient(conf) as tc:
        assert tc.end_txn(res.transactional_id, res.producer_id, res.producer_epoch, True) == 0
    assert sorted(r.value for r in reader.read_all(topic)) == sorted(values.to_pylist())
    link.close()


def test_missing_topic_write_or_transactional_id_acl_is_named(secure_kafka):
    sk = secure_kafka
    topic = sk.admin_target.create_topic(unique("wsec"))
    prefix = unique("sink")
    sk.grant_writer("writer", topic, prefix, topic_write=False)  # DESCRIBE only on the topic
    conf = sk.client_config("writer", "SASL_SSL", "SCRAM-SHA-512")
    link = ClusterLink(conf)
    p = WireProducer(conf, transactional_id=f"{prefix}-p0", link=link, where="batch 0, task 0")
    p.begin()
    with pytest.raises(KafkaAuthorizationError) as info:
        p.send(topic, pa.array([b"x"]))
        p.flush()
    assert repr(topic) in str(info.value) and "WRITE and DESCRIBE" in str(info.value)
    assert "kafka-acls.sh" in str(info.value)
    p.close()
    tid = f"not-{prefix}-p0"
    q = WireProducer(conf, transactional_id=tid, link=link)
    with pytest.raises(KafkaAuthorizationError) as info:
        q.begin()
    assert repr(tid) in str(info.value) and "TransactionalId" in str(info.value)
    assert sk.admin_target.read_all(topic, isolation="read_uncommitted") == []
    link.close()
