"""The single-node broker of the ``kafka`` fixture on machines with Docker: the official
``apache/kafka`` image at the same Apache Kafka version as the native jars.

testcontainers-python 4.15's ``KafkaContainer`` drives only Confluent's images (its start script
runs ``/etc/confluent/docker/configure`` and ``launch``), whose Kafka is Confluent's build with its
own version numbers. Apache's image is configured by ``KAFKA_*`` environment variables alone
(``/etc/kafka/docker/run``), so a plain ``DockerContainer`` runs it. Its advertised listener needs
the host port Docker maps, known only once the container exists: the container waits for a file
holding it, as testcontainers' own Kafka module does.
"""

from __future__ import annotations

import os
import re

from txkafka.embedded_kafka import KafkaRelease

# Apache publishes apache/kafka images from Kafka 3.7.0 on.
FIRST_IMAGE = (3, 7)
CLIENT_PORT = 9092  # advertised to the tests as the mapped host port
_BROKER_PORT = 9094  # inter-broker listener: the coordinator sends transaction markers to itself
_CONTROLLER_PORT = 9093
_ADVERTISED_FILE = "/tmp/txkafka-advertised-listeners"
_CLUSTER_ID = "tXkAfKaTeStCoNtAiNeR01"


def image_for(version: str) -> str | None:
    """The image that runs ``version``: ``TXKAFKA_KAFKA_IMAGE`` when set (an image laid out like
    Apache's, a mirror or another tag; it then decides the version), else
    ``apache/kafka:VERSION``; None when Apache published no image for it."""
    override = os.environ.get("TXKAFKA_KAFKA_IMAGE")
    if override:
        return override
    if KafkaRelease(version).minor_version < FIRST_IMAGE:
        return None
    return f"apache/kafka:{version}"


def container_env() -> dict[str, str]:
    """Broker settings: one combined KRaft node, transactions working with one replica."""
    return {
        "CLUSTER_ID": _CLUSTER_ID,
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": (f"PLAINTEXT://0.0.0.0:{CLIENT_PORT},BROKER://0.0.0.0:{_BROKER_PORT},"
                            f"CONTROLLER://0.0.0.0:{_CONTROLLER_PORT}"),
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":
            "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "BROKER",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@localhost:{_CONTROLLER_PORT}",
        "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
    }


def start_command() -> str:
    """Wait for the advertised listeners, then hand over to the image's own start script."""
    return (f"sh -c 'while [ ! -s {_ADVERTISED_FILE} ]; do sleep 0.1; done; "
            f"export KAFKA_ADVERTISED_LISTENERS=$(cat {_ADVERTISED_FILE}); exec /etc/kafka/docker/run'")


def advertised_listeners(host: str, mapped_port: int) -> str:
    return f"PLAINTEXT://{host}:{mapped_port},BROKER://localhost:{_BROKER_PORT}"


class ApacheKafkaContainer:
    """Start, address and stop one ``apache/kafka`` container (needs a Docker daemon)."""

    def __init__(self, image: str) -> None:
        from testcontainers.core.container import DockerContainer  # type: ignore[import-not-found]

        self.image = image
        self._container = DockerContainer(image).with_exposed_ports(CLIENT_PORT)
        for key, value in container_env().items():
            self._container.with_env(key, value)
        self._container.with_command(start_command())

    def start(self, timeout: float = 120) -> str:
        """Start the broker; return its bootstrap address once it logs that it started."""
        from testcontainers.core.wait_strategies import (  # type: ignore[import-not-found]
            LogMessageWaitStrategy,
        )

        c = self._container
        c.start()
        bootstrap = f"{c.get_container_host_ip()}:{c.get_exposed_port(CLIENT_PORT)}"
        host, port = bootstrap.rsplit(":", 1)
        c.copy_into_container(advertised_listeners(host, int(port)).encode(), _ADVERTISED_FILE)
        wait = LogMessageWaitStrategy(re.compile(r"Kafka Server started"))
        wait.with_startup_timeout(int(timeout))
        wait.wait_until_ready(c)
        return bootstrap

    def stop(self) -> None:
        self._container.stop()
