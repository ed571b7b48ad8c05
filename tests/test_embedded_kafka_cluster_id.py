"""The embedded broker's cluster id must never look like a command-line option."""
import uuid

from txkafka import embedded_kafka


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch):
    # 0xF8 encodes to "-" as the first URL-safe base64 character: kafka-storage would read
    # "-t -abc..." as two options and refuse to format (this failed a CI run).
    dashed = uuid.UUID(bytes=b"\xf8" + b"\x01" * 15)
    plain = uuid.UUID(bytes=b"\x10" + b"\x02" * 15)
    draws = iter([dashed, dashed, plain])
    monkeypatch.setattr(embedded_kafka.uuid, "uuid4", lambda: next(draws))
    text = embedded_kafka._random_cluster_id()
    assert not text.startswith("-")
    assert len(text) == 22
    assert text == "EAICAgICAgICAgICAgICAg"


def test_cluster_ids_are_kafka_uuid_strings():
    for _ in range(500):
        text = embedded_kafka._random_cluster_id()
        assert len(text) == 22 and not text.startswith("-")
        assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
