"""The foundation: a real Apache Kafka with working transactions, from the project's own tooling."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from typing import Iterator

import pytest
from confluent_kafka import KafkaException

from integration_tests.kafka_helpers import KafkaTarget, unique
from integration_tests.pipeline_helpers import wait_until
from txkafka.connector.client.transactions import END_TXN, TransactionClient
from txkafka.embedded_kafka import (
    KAFKA_VERSION,
    NEWEST_TESTED_KAFKA,
    OLDEST_TESTED_KAFKA,
    EmbeddedKafka,
)

# The highest EndTxn version each tested release answers: 3.6 has v3 (flexible), 4.0 added v5
# (KIP-890's new protocol, which the driver never sends).
_END_TXN_MAX = {OLDEST_TESTED_KAFKA: 3, NEWEST_TESTED_KAFKA: 5}


@pytest.mark.kafka_matrix
def test_the_broker_runs_the_release_the_run_names(kafka):
    """The version matrix tests what it says: the broker is the release TXKAFKA_KAFKA_VERSION
    names, and the driver's protocol client negotiates EndTxn down to what that release has."""
    if kafka.kind == "external":
        pytest.skip("TXKAFKA_BOOTSTRAP: the cluster's release is not this run's to name")
    if kafka.kind == "native":
        log = kafka.cluster.node_infos[0].log_path.read_text(errors="replace")
        assert f"Kafka version: {KAFKA_VERSION} " in log  # AppInfoParser, at broker start
    host, port = kafka.bootstrap.split(",")[0].rsplit(":", 1)
    with TransactionClient({"bootstrap.servers": kafka.bootstrap}) as client:
        conn = client._conn(host, int(port))
        broker_max = conn.api_versions[END_TXN][1]
        assert conn.version_for(END_TXN, 0, 4) == min(broker_max, 4)
    if KAFKA_VERSION in _END_TXN_MAX:
        assert broker_max == _END_TXN_MAX[KAFKA_VERSION]


def test_committed_visible_aborted_hidden(kafka):
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [(f"c{i}", f"committed-{i}") for i in range(20)], transactional=True)
    kafka.produce(topic, [(f"a{i}", f"aborted-{i}") for i in range(7)], transactional=True,
                  commit=False)
    kafka.produce(topic, [(f"d{i}", f"committed2-{i}") for i in range(5)], transactional=True)

    committed = kafka.read_all(topic, isolation="read_committed")
    values = sorted(r.value.decode() for r in committed)
    assert values == sorted([f"committed-{i}" for i in range(20)] +
                            [f"committed2-{i}" for i in range(5)])

    everything = kafka.read_all(topic, isolation="read_uncommitted")
    assert sum(r.value.startswith(b"aborted-") for r in everything) == 7
    # Markers occupy offsets: the log end is past the record count.
    assert sum(kafka.end_offsets(topic).values()) > len(everything)


def test_second_producer_with_same_id_fences_the_first(kafka):
    topic = kafka.create_topic()
    tid = unique("fence")
    first = kafka.producer(tid)
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, b"from-first")
    first.flush(10)

    second = kafka.producer(tid)
    second.init_transactions(30)  # fences `first` and aborts its open transaction
    second.begin_transaction()
    second.produce(topic, b"from-second")
    second.commit_transaction(30)

    with pytest.raises(KafkaException) as err:
        first.commit_transaction(10)
    assert err.value.args[0].fatal() or "fenced" in str(err.value).lower()

    values = [r.value for r in kafka.read_all(topic)]
    assert values == [b"from-second"]


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txkafka", *args], capture_output=True, text=True,
                          timeout=timeout)


@contextlib.contextmanager
def _cli_cluster(nodes: int) -> Iterator[KafkaTarget]:
    """A cluster started with ``txkafka broker start``: a second start is a no-op, status lists
    every node alive, and ``stop --clean`` leaves nothing running."""
    name = unique("cli")
    try:
        first = _cli("broker", "start", "--name", name, "--nodes", str(nodes))
        assert first.returncode == 0, first.stderr
        bootstrap = first.stdout.strip().splitlines()[-1]
        assert bootstrap.startswith("127.0.0.1:") and bootstrap.count(",") == nodes - 1
        again = _cli("broker", "start", "--name", name, "--nodes", str(nodes))
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip().splitlines()[-1] == bootstrap
        assert "already running" in again.stderr
        status = _cli("broker", "status", "--name", name, "--json")
        assert status.returncode == 0
        listed = json.loads(status.stdout)["nodes"]
        assert len(listed) == nodes and all(n["alive"] for n in listed)
        yield KafkaTarget(bootstrap, "native", EmbeddedKafka(name))  # the command's cluster
    finally:
        stop = _cli("broker", "stop", "--clean", "--name", name)
    assert stop.returncode == 0, stop.stderr
    assert _cli("broker", "status", "--name", name).returncode == 3


def test_broker_command_starts_one_node_idempotently_and_stop_cleans_up():
    with _cli_cluster(1) as kafka:
        topic = kafka.create_topic(partitions=1)
        kafka.produce(topic, [("k", "v")], transactional=True)
        assert [r.value for r in kafka.read_all(topic)] == [b"v"]


def test_broker_command_starts_three_nodes_that_keep_serving_with_one_down():
    """Transactions go on with one node of three down, and the reader's offset look-ups, whose
    client learnt the cluster before the crash, find the partition's new leader."""
    from txkafka.connector.source.offset_reader import KafkaOffsetReader
    from txkafka.connector.source.options import parse_source_options

    with _cli_cluster(3) as kafka3:
        cluster: EmbeddedKafka = kafka3.cluster
        assert kafka3.replication_factor == 3
        topic = kafka3.create_topic(partitions=3)
        kafka3.produce(topic, [(f"k{i}", f"before-{i}") for i in range(30)], transactional=True)
        offsets = KafkaOffsetReader(parse_source_options(
            {"kafka.bootstrap.servers": kafka3.bootstrap, "subscribe": topic}, streaming=True))
        tps = offsets.topic_partitions()

        def offsets_agree() -> bool:  # commit markers land just after commit_transaction returns
            return offsets.latest_offsets(tps) == {(topic, p): o
                                                   for p, o in kafka3.end_offsets(topic).items()}

        wait_until(offsets_agree, 20, "the reader's latest offsets")
        md = kafka3.admin().list_topics(topic, timeout=30)
        victim = md.topics[topic].partitions[0].leader  # partition 0 must elect a new leader
        cluster.kill_node(victim)
        try:
            assert victim not in cluster.alive_nodes()
            kafka3.produce(topic, [(f"k{i}", f"during-{i}") for i in range(30)], transactional=True)
            kafka3.produce(topic, [(f"k{i}", f"aborted-{i}") for i in range(5)],
                           transactional=True, commit=False)
            values = sorted(r.value.decode() for r in kafka3.read_all(topic))
            assert values == sorted([f"before-{i}" for i in range(30)]
                                    + [f"during-{i}" for i in range(30)])
            wait_until(offsets_agree, 20, "the reader's latest offsets with the leader dead")
        finally:
            cluster.start_node(victim)
        cluster.wait_ready(120)
        assert sorted(cluster.alive_nodes()) == [1, 2, 3]


def test_a_broker_that_cannot_start_fails_with_its_log_tail(tmp_path):
    from txkafka.embedded_kafka import EmbeddedKafkaError

    bad = EmbeddedKafka("bad", 1, root=tmp_path / "bad",
                        extra_config={"num.io.threads": "not-a-number"})
    with pytest.raises(EmbeddedKafkaError) as err:
        bad.start(timeout=120)
    bad.destroy()
    text = str(err.value)
    assert "num.io.threads" in text  # the broker's own complaint, from its log tail
