"""Exactly once from one Kafka cluster to another (docs/user-guide.md, "Replicating or migrating
topics between clusters exactly once").

Kafka's own transactions cannot do this: a consume-transform-produce transaction commits the
consumed offsets in the output cluster's group coordinator, so input and output must share a
cluster. txkafka keeps the input's offsets in Spark's checkpoint, beside the sink's decisions, so
the input can live anywhere. Cluster A is the suite's plaintext broker, cluster B the secured one
(SASL_SSL with SCRAM-SHA-512, given to the writer alone through its ``kafka.*`` options). The
driver is killed at the protocol's worst point, with a batch committed on B in part (one of its
transactions committed, the others decided and open); the restart completes it, and the output on
B, read with read_committed, holds every committed input record of A once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from integration_tests.pipeline_helpers import make_input, sink_prefix
from integration_tests.spark_driver import DriverProcess
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.kafka_admin import scan_topic
from txkafka.verify import verify

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

DRIVER = Path(__file__).with_name("switch_driver.py")


def test_exactly_once_from_cluster_a_to_a_secured_cluster_b_across_a_driver_kill(
        kafka, secure_kafka, driver_processes, tmp_path):
    b = secure_kafka.admin_target  # SASL_SSL, SCRAM-SHA-512
    topics = make_input(kafka, records=3000, per_txn=250)  # on A (its output topic stays unused)
    out = b.create_topic(partitions=3)
    ck = str(tmp_path / "ck")
    writer = secure_kafka.client_config("admin", "SASL_SSL", "SCRAM-SHA-512")
    leg = {"name": "a-to-b", "bootstrap": kafka.bootstrap, "input": topics.source,
           "output": out, "checkpoint": ck, "source": "txkafka", "sink": "txkafka",
           "max_offsets": 500, "output_bootstrap": writer.pop("bootstrap.servers"),
           "sink_kafka": writer}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"trigger_ms": 300, "timeout_s": 600, "legs": [leg]}))
    # Batch 2 committed on B in part: its first transaction's EndTxn landed, the others' not.
    faults = f"point=between_endtxn,batch=2,action=kill,once={tmp_path / 'killed'}"
    runs = []
    for _ in range(3):
        proc = driver_processes(DRIVER, str(spec), env={"TXKAFKA_FAULT_INJECTION": faults})
        code = proc.wait(700)
        runs.append(code)
        if code == 0:
            break
        assert code == -9, f"driver exit {code}:\n{proc.tail(80)}"
    assert runs == [-9, 0], f"exit codes {runs}:\n{proc.tail(80)}"
    assert "LEG a-to-b DONE" in proc.output(), proc.tail(80)

    rep = verify(b.conf, topics.source, out,
                 input_records=scan_topic(kafka.conf, topics.source, 60, "read_committed"))
    assert rep.expected == topics.expected_ids and rep.ok, rep.text()
    log = SinkCommitLog(ck)
    killed = log.batch_state(2)
    assert len(killed.last.decision) > 1 and (killed.last.outcome or {}).get("recovered"), \
        "batch 2 (several transactions, killed between their commits) completed by the restart"
    assert b.open_transactions(sink_prefix(ck)) == []
