"""The Docker fixture's broker: the apache/kafka image of the release the native jars run, set up
so transactions work on one node. No Docker engine runs here: the container is checked as data."""

from __future__ import annotations

import re
from pathlib import Path

from integration_tests import kafka_container
from txkafka.embedded_kafka import NEWEST_TESTED_KAFKA, OLDEST_TESTED_KAFKA

REPO = Path(__file__).resolve().parents[1]


def test_docker_runs_the_same_apache_kafka_release(monkeypatch):
    monkeypatch.delenv("TXKAFKA_KAFKA_IMAGE", raising=False)
    assert kafka_container.image_for(NEWEST_TESTED_KAFKA) == f"apache/kafka:{NEWEST_TESTED_KAFKA}"
    assert kafka_container.image_for("3.7.0") == "apache/kafka:3.7.0"
    assert kafka_container.image_for(OLDEST_TESTED_KAFKA) is None  # Apache's images start at 3.7
    monkeypatch.setenv("TXKAFKA_KAFKA_IMAGE", "registry.example/kafka:custom")
    assert kafka_container.image_for(OLDEST_TESTED_KAFKA) == "registry.example/kafka:custom"


def test_the_container_advertises_the_mapped_port_and_keeps_markers_inside():
    env = kafka_container.container_env()
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    assert "KAFKA_ADVERTISED_LISTENERS" not in env  # known once the container exists
    listeners = kafka_container.advertised_listeners("127.0.0.1", 32768)
    assert listeners.startswith("PLAINTEXT://127.0.0.1:32768,")
    # The coordinator writes transaction markers over the inter-broker listener: it must resolve
    # inside the container, not to the host's mapped port.
    broker = [x for x in listeners.split(",") if x.startswith(env["KAFKA_INTER_BROKER_LISTENER_NAME"])]
    assert broker == ["BROKER://localhost:9094"]
    assert "exec /etc/kafka/docker/run" in kafka_container.start_command()


def test_the_compose_file_runs_the_newest_tested_release():
    compose = (REPO / "docker" / "docker-compose.yml").read_text()
    images = re.findall(r"image: \$\{KAFKA_IMAGE:-([^}]+)\}", compose)
    assert images == [f"apache/kafka:{NEWEST_TESTED_KAFKA}"]
