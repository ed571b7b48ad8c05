"""The error code table agrees with confluent_kafka.KafkaError, the codes' reference."""

from __future__ import annotations

import subprocess
import sys

from confluent_kafka import KafkaError

from txkafka.connector.client import error_codes as kafka_error_codes

# Owner names that KafkaError spells differently, and codes it does not have.
_KAFKAERROR_NAME = {"NONE": "NO_ERROR", "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
                    "UNKNOWN_TOPIC_OR_PARTITION": "UNKNOWN_TOPIC_OR_PART",
                    "MESSAGE_TOO_LARGE": "MSG_SIZE_TOO_LARGE"}
_NOT_IN_KAFKAERROR = {"TRANSACTIONAL_ID_NOT_FOUND"}


def _codes() -> dict[str, int]:
    return {n: v for n, v in vars(kafka_error_codes).items()
            if n.lstrip("_").isupper() and isinstance(v, int)}


def test_every_code_is_kafkaerrors_number() -> None:
    codes = _codes()
    assert len(codes) > 20
    for name, value in codes.items():
        if name in _NOT_IN_KAFKAERROR:
            assert not hasattr(KafkaError, name), f"{name} is in KafkaError now: use its number"
            continue
        assert getattr(KafkaError, _KAFKAERROR_NAME.get(name, name)) == value, name


def test_error_name_uses_librdkafkas_table() -> None:
    assert kafka_error_codes.error_name(kafka_error_codes.PRODUCER_FENCED) == "PRODUCER_FENCED"
    assert "105" in kafka_error_codes.error_name(kafka_error_codes.TRANSACTIONAL_ID_NOT_FOUND)


def test_commit_path_does_not_import_confluent_kafka() -> None:
    """Why the table holds numbers: the driver's commit path stays free of librdkafka's import."""
    code = ("import sys, txkafka.connector.sink.committer, "
            "txkafka.connector.client.librdkafka_errors; "
            "sys.exit(1 if 'confluent_kafka' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
