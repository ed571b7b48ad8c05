"""Unit tests: the id verifier never calls a check that checked nothing exactly once (no broker)."""

from __future__ import annotations

import pytest

import txkafka.verify as verify_mod
from txkafka.cli import main
from txkafka.connector.errors import TxKafkaError
from txkafka.verify import verify, verify_counts


class FakeMessage:
    """The part of confluent_kafka.Message the verifier reads."""

    def __init__(self, key: bytes | None, partition: int = 0, offset: int = 0,
                 headers: list[tuple[str, bytes]] | None = None) -> None:
        self._key, self._partition, self._offset = key, partition, offset
        self._headers = headers

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return b"v"

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


def _topics(monkeypatch, **records: list[FakeMessage]) -> None:
    """scan_topic answers from ``records`` (topic name -> messages) instead of a broker."""
    monkeypatch.setattr(verify_mod, "scan_topic",
                        lambda conf, topic, *a, **kw: iter(records[topic]))


def _ids(n: int, header: str | None = None) -> list[FakeMessage]:
    if header:
        return [FakeMessage(None, 0, i, [(header, f"id-{i}".encode())]) for i in range(n)]
    return [FakeMessage(f"id-{i}".encode(), 0, i) for i in range(n)]


def test_the_same_ids_in_and_out_are_exactly_once(monkeypatch):
    _topics(monkeypatch, src=_ids(3), dst=_ids(3))
    rep = verify({}, "src", "dst")
    assert rep.ok and (rep.expected, rep.found) == (3, 3), rep.text()
    assert "EXACTLY ONCE" in rep.text()


def test_a_misspelt_id_header_checks_nothing_and_fails(monkeypatch):
    _topics(monkeypatch, src=_ids(5, header="rid"), dst=_ids(5, header="rid"))
    rep = verify({}, "src", "dst", id_in="header:ridd", id_out="header:ridd")
    assert rep.expected == 0
    assert not rep.ok, rep.text()
    text = rep.text()
    assert "FAILED" in text and "EXACTLY ONCE" not in text
    assert "header:ridd" in text and "5 input records" in text, text


def test_an_empty_input_fails_unless_explicitly_allowed(monkeypatch):
    _topics(monkeypatch, src=[], dst=[])
    rep = verify({}, "src", "dst")
    assert not rep.ok and "input topic src holds no committed record" in rep.text(), rep.text()
    allowed = verify({}, "src", "dst", allow_empty=True)
    assert allowed.ok and "EXACTLY ONCE" in allowed.text(), allowed.text()


def test_an_allowed_empty_input_still_fails_on_output_records(monkeypatch):
    _topics(monkeypatch, src=[], dst=_ids(1))
    rep = verify({}, "src", "dst", allow_empty=True)
    assert rep.unexpected == 1 and not rep.ok, rep.text()


def test_output_records_without_an_id_are_unexpected(monkeypatch):
    out = _ids(2) + [FakeMessage(None, 1, 7)]
    _topics(monkeypatch, src=_ids(2), dst=out)
    rep = verify({}, "src", "dst")
    assert rep.unexpected == 1 and not rep.ok, rep.text()
    assert (rep.found, rep.output_without_id) == (3, 1), rep.text()
    assert "no id at dst[1]@7" in rep.text(), rep.text()


def test_cli_exits_non_zero_on_an_empty_input_unless_allow_empty(monkeypatch, capsys):
    _topics(monkeypatch, src=[], dst=[])
    args = ["verify", "-b", "127.0.0.1:1", "--input", "src", "--output", "dst"]
    assert main(args) == 1
    assert "FAILED" in capsys.readouterr().out
    assert main(args + ["--allow-empty"]) == 0
    assert "EXACTLY ONCE" in capsys.readouterr().out


def test_a_checkpoint_uri_with_credentials_stays_out_of_the_error():
    uri = "bogus://AKIAEXAMPLEKEY:S3CR3T/vAlUe@bucket/ck?token=T0KENVALUE"
    with pytest.raises(Exception) as err:
        verify_counts({}, "src", "dst", checkpoint=uri)
    text = f"{err.value} {err.value!r}"
    assert isinstance(err.value, TxKafkaError), text
    for secret in ("AKIAEXAMPLEKEY", "S3CR3T", "vAlUe", "T0KENVALUE"):
        assert secret not in text, text
    assert "bucket/ck" in text


def test_cli_reports_an_unopenable_checkpoint_without_its_credentials(capsys):
    uri = "bogus://AKIAEXAMPLEKEY:S3CR3TVALUE@bucket/ck"
    code = main(["verify", "-b", "127.0.0.1:1", "--input", "src", "--output", "dst",
                 "--check", "counts", "--checkpoint", uri])
    captured = capsys.readouterr()
    assert code == 2 and "bogus://[redacted]@bucket/ck" in captured.err, captured.err
    assert "S3CR3TVALUE" not in captured.out + captured.err
