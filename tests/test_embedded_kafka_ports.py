"""The embedded broker's ports: distinct, and a start whose port was taken meanwhile is retried."""
import pytest

from txkafka import embedded_kafka
from txkafka.embedded_kafka import EmbeddedKafkaError


def test_free_ports_are_distinct():
    ports = embedded_kafka.free_ports(12)
    assert len(set(ports)) == 12


def _cluster(tmp_path, monkeypatch, outcomes):
    c = embedded_kafka.EmbeddedKafka("ports-test", root=tmp_path / "c", progress=lambda m: None)
    monkeypatch.setattr(embedded_kafka, "kafka_jars", lambda progress, version: tmp_path)
    calls = []

    def start_once(lib, timeout):
        calls.append(lib)
        out = outcomes.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    monkeypatch.setattr(c, "_start_once", start_once)
    monkeypatch.setattr(c, "stop", lambda **kw: None)
    return c, calls


def test_a_start_whose_port_was_taken_is_retried_on_new_ports(tmp_path, monkeypatch):
    taken = EmbeddedKafkaError("Kafka node 1 exited during start-up.\n... Socket server failed to "
                               "bind to 127.0.0.1:55453: Address already in use.")
    c, calls = _cluster(tmp_path, monkeypatch, [taken, "127.0.0.1:9"])
    assert c.start() == "127.0.0.1:9" and len(calls) == 2


def test_other_start_failures_and_a_port_race_every_time_are_not_hidden(tmp_path, monkeypatch):
    c, calls = _cluster(tmp_path, monkeypatch, [EmbeddedKafkaError("formatting node 1 failed")])
    with pytest.raises(EmbeddedKafkaError, match="formatting"):
        c.start()
    assert len(calls) == 1
    taken = EmbeddedKafkaError("Address already in use")
    c, calls = _cluster(tmp_path, monkeypatch, [taken, taken, taken])
    with pytest.raises(EmbeddedKafkaError, match="Address already in use"):
        c.start()
    assert len(calls) == 3
