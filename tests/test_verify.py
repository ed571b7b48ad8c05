"""Unit tests: no check of txkafka verify calls a run that checked nothing exactly once, and an
output record without a key is unexpected in every check (no broker)."""

from __future__ import annotations

import pytest

import txkafka.verify as verify_mod
from tests.spark_checkpoint_files import write_commits, write_offsets
from txkafka.cli import main, run
from txkafka.connector.errors import TxKafkaError
from txkafka.verify import verify, verify_counts, verify_windowed_counts


class FakeMessage:
    """The part of confluent_kafka.Message the verifier reads."""

    def __init__(self, key: bytes | None, partition: int = 0, offset: int = 0,
                 headers: list[tuple[str, bytes]] | None = None, value: bytes = b"v",
                 timestamp_ms: int = 0) -> None:
        self._key, self._partition, self._offset = key, partition, offset
        self._headers = headers
        self._value, self._ts = value, timestamp_ms

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return 1, self._ts

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
    code = run(["verify", "-b", "127.0.0.1:1", "--input", "src", "--output", "dst",
                "--check", "counts", "--checkpoint", uri])
    captured = capsys.readouterr()
    assert code == 4 and "bogus://[redacted]@bucket/ck" in captured.err, captured.err
    assert "S3CR3TVALUE" not in captured.out + captured.err


# ------------------------------------------------------------------ counts and windowed counts


def _msgs(pairs: list[tuple[str | None, str]], **kw) -> list[FakeMessage]:
    return [FakeMessage(None if k is None else k.encode(), 0, i, value=v.encode(), **kw)
            for i, (k, v) in enumerate(pairs)]


_COUNT_IN = [("a", "1"), ("b", "2"), ("a", "3")]
_COUNT_OUT = [("a", "1"), ("b", "1"), ("a", "2")]


def _counts(inp, out, **kw):
    return verify_counts({}, "src", "dst", input_records=_msgs(inp), output_records=_msgs(out),
                         **kw)


def test_counts_pass_on_a_good_run():
    rep = _counts(_COUNT_IN, _COUNT_OUT)
    assert rep.ok and rep.nothing_checked is None, rep.text()
    assert "EXACTLY ONCE" in rep.text()


def test_counts_on_an_empty_input_and_output_fail_with_the_reason():
    rep = _counts([], [])
    assert not rep.ok, rep.text()
    text = rep.text()
    assert "FAILED" in text and "EXACTLY ONCE" not in text
    assert "nothing verified: the input topic src holds no committed record" in text, text
    assert "the output topic dst holds no committed record" in text, text
    allowed = _counts([], [], allow_empty=True)
    assert allowed.ok and "(allowed by --allow-empty)" in allowed.text(), allowed.text()
    # Allowed to be empty, yet an update no input explains still fails.
    assert not _counts([], [("a", "1")], allow_empty=True).ok


def test_counts_with_an_input_and_no_output_fail():
    rep = _counts(_COUNT_IN, [])
    assert not rep.ok and rep.missing == 2, rep.text()
    assert "the output topic dst holds no committed record" in rep.text(), rep.text()


def test_counts_of_an_input_without_keys_check_nothing():
    rep = _counts([(None, "1"), (None, "2")], [])
    assert not rep.ok and "none of the 2 input records has a key" in rep.text(), rep.text()


def test_counts_output_records_without_a_key_are_unexpected():
    rep = _counts(_COUNT_IN, _COUNT_OUT + [(None, "7")])
    assert rep.unexpected == 1 and rep.output_without_key == 1 and not rep.ok, rep.text()
    assert "no key at dst[0]@3" in rep.text(), rep.text()


def _checkpoint(root, topic: str, ends: list[int], committed: int) -> str:
    """Spark's offset log for batches ending at ``ends`` (one partition), committed up to
    ``committed`` (-1: none)."""
    write_commits(root, *range(committed + 1))
    for b, end in enumerate(ends):
        write_offsets(root, b, f'{{"{topic}":{{"0":{end}}}}}', watermark_ms=1000 * b)
    return str(root)


def test_counts_against_a_checkpoint_with_no_committed_batch_check_nothing(tmp_path):
    ck = _checkpoint(tmp_path / "ck", "src", [0, 2, 3], committed=-1)
    rep = _counts(_COUNT_IN, _COUNT_OUT, checkpoint=ck)
    assert rep.expected_updates == 0 and not rep.ok, rep.text()
    assert "no committed batch of the checkpoint's offset log" in rep.text(), rep.text()
    done = _counts(_COUNT_IN, _COUNT_OUT, checkpoint=_checkpoint(tmp_path / "ck2", "src",
                                                                 [0, 2, 3], committed=2))
    assert done.ok and done.expected_updates == 3, done.text()


def _windows(inp, out, **kw):
    ins = [FakeMessage(None if k is None else k.encode(), 0, i, timestamp_ms=ts)
           for i, (k, ts) in enumerate(inp)]
    return verify_windowed_counts({}, "src", "dst", 1000, watermark_delay_ms=0,
                                  input_records=ins, output_records=_msgs(out), **kw)


_WIN_IN = [("a", 100), ("a", 200), ("b", 300), ("z", 5000)]  # z's record closes the others
_WIN_OUT = [("a@0", "2"), ("b@0", "1")]


def test_windowed_counts_pass_on_a_good_run():
    rep = _windows(_WIN_IN, _WIN_OUT)
    assert rep.ok and rep.closed == 2, rep.text()


def test_windowed_counts_on_an_empty_input_and_output_fail_with_the_reason():
    rep = _windows([], [])
    assert not rep.ok, rep.text()
    assert "nothing verified: the input topic src holds no committed record" in rep.text()
    assert _windows([], [], allow_empty=True).ok


def test_windowed_counts_with_no_closed_window_check_nothing():
    rep = _windows([("a", 100)], [])
    assert rep.closed == 0 and not rep.ok, rep.text()
    assert "closed none of the 1 (key, window) groups" in rep.text(), rep.text()


def test_windowed_counts_with_no_output_fail():
    rep = _windows(_WIN_IN, [])
    assert not rep.ok and rep.missing == 2, rep.text()
    assert "the output topic dst holds no committed record" in rep.text(), rep.text()


def test_windowed_counts_output_records_without_a_key_are_unexpected():
    rep = _windows(_WIN_IN, _WIN_OUT + [(None, "2")])
    assert rep.unexpected == 1 and rep.output_without_key == 1 and not rep.ok, rep.text()
    assert "no key at dst[0]@2" in rep.text(), rep.text()


@pytest.mark.parametrize("check", [[], ["--check", "counts"],
                                   ["--check", "windowed-counts", "--watermark-ms", "0"]])
def test_cli_exit_code_printed_verdict_and_json_agree_on_an_empty_run(monkeypatch, capsys,
                                                                      tmp_path, check):
    import json

    _topics(monkeypatch, src=[], dst=[])
    report = tmp_path / "r.json"
    args = ["verify", "-b", "127.0.0.1:1", "--input", "src", "--output", "dst", *check,
            "--json-out", str(report)]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "nothing verified" in out, out
    data = json.loads(report.read_text())
    assert data["ok"] is False and "holds no committed record" in data["nothing_checked"]
    assert main(args + ["--allow-empty"]) == 0
    assert "EXACTLY ONCE" in capsys.readouterr().out
    assert json.loads(report.read_text())["ok"] is True


@pytest.mark.parametrize("check", [["--check", "counts"],
                                   ["--check", "windowed-counts", "--watermark-ms", "0",
                                    "--window-ms", "1000"]])
def test_cli_passes_a_good_count_run(monkeypatch, capsys, check):
    if check[1] == "counts":
        _topics(monkeypatch, src=_msgs(_COUNT_IN), dst=_msgs(_COUNT_OUT))
    else:
        _topics(monkeypatch, src=[FakeMessage(k.encode(), 0, i, timestamp_ms=ts)
                                  for i, (k, ts) in enumerate(_WIN_IN)], dst=_msgs(_WIN_OUT))
    assert main(["verify", "-b", "127.0.0.1:1", "--input", "src", "--output", "dst", *check]) == 0
    assert "EXACTLY ONCE" in capsys.readouterr().out


def test_a_repeated_input_id_fails_so_a_lost_copy_cannot_hide(monkeypatch):
    # Input A twice (two partitions) and B; output A once: one input record is lost, though
    # every id is found. The ids check needs unique input ids.
    src = [FakeMessage(b"A", 0, 0), FakeMessage(b"A", 1, 0), FakeMessage(b"B", 0, 1)]
    _topics(monkeypatch, src=src, dst=[FakeMessage(b"A"), FakeMessage(b"B", 0, 1)])
    rep = verify({}, "src", "dst")
    assert not rep.ok and rep.input_repeated == 1, rep.text()
    assert "repeated input ids 1" in rep.text() and "A at src[0]@0 and [1]@0" in rep.text()


def test_input_records_without_an_id_fail_as_their_loss_would_pass(monkeypatch):
    src = [FakeMessage(None, 0, 0), FakeMessage(None, 0, 1), *_ids(2)]
    _topics(monkeypatch, src=src, dst=_ids(2))  # both id-less input records lost
    rep = verify({}, "src", "dst")
    assert not rep.ok and rep.input_without_id == 2, rep.text()
    assert "input without id   2" in rep.text()


def test_a_topic_is_read_whole_only_once_no_transaction_is_open(monkeypatch):
    """A read_committed reader stops at the last stable offset: with a transaction open, what
    follows it (committed records included: a duplicate) would be unseen. verify waits for the
    end of open transactions, then fails naming them; and fails if the end moved meanwhile."""
    from txkafka import kafka_admin

    marks = {"read_committed": {0: (0, 3), 1: (0, 5)}, "read_uncommitted": {0: (0, 6), 1: (0, 5)}}
    monkeypatch.setattr(kafka_admin, "watermarks",
                        lambda conf, topic, isolation="read_committed": marks[isolation])
    monkeypatch.setattr(kafka_admin.time, "sleep", lambda s: None)
    with pytest.raises(kafka_admin.OpenTransactionError,
                       match=r"out: a transaction is still open after 0s at \[0\] from offset 3 "
                             r"\(end 6\).*txkafka transactions list\|abort"):
        kafka_admin.settled_ends({}, "out", 0)
    marks["read_committed"][0] = (0, 6)
    assert kafka_admin.settled_ends({}, "out", 0) == {0: 6, 1: 5}


def test_verify_reads_whole_topics_unless_told_it_is_a_look_at_a_running_pipeline(monkeypatch):
    seen = []

    def scan(conf, topic, *a, whole=False, **kw):
        seen.append((topic, whole))
        return iter(_ids(2))

    monkeypatch.setattr(verify_mod, "scan_topic", scan)
    assert verify({}, "src", "dst").ok and seen == [("src", True), ("dst", True)]
    seen.clear()
    assert verify({}, "src", "dst", whole=False).ok and seen == [("src", False), ("dst", False)]


@pytest.mark.parametrize("check", [["--check", "counts"],
                                   ["--check", "windowed-counts", "--window-ms", "1000"]])
def test_a_checkpoint_without_an_offset_log_is_an_error_not_an_empty_log(monkeypatch, capsys,
                                                                         tmp_path, check):
    """A mistyped --checkpoint, or a folder that is not a query's checkpoint, exits 4 naming the
    path (it read as an empty offset log: exit 1, "nothing verified"), before a topic is read."""
    def no_scan(*args, **kwargs):
        raise AssertionError("a topic was read")

    monkeypatch.setattr(verify_mod, "scan_topic", no_scan)
    not_a_checkpoint = tmp_path / "ck"
    not_a_checkpoint.mkdir()
    write_commits(not_a_checkpoint, 0)  # a folder, but no offsets/
    for path, missing in ((tmp_path / "typo", tmp_path / "typo"),
                          (not_a_checkpoint, not_a_checkpoint / "offsets")):
        code = run(["verify", "-b", "127.0.0.1:1", "--input", "src", "--output", "dst", *check,
                    "--checkpoint", str(path)])
        err = capsys.readouterr().err
        assert code == 4, err
        assert err == (f"error: --checkpoint {path}: no Spark offset log there ({missing} does "
                       "not exist). Give the checkpointLocation of the query that wrote "
                       "--output.\n"), err


def test_ids_against_a_checkpoint_require_what_its_committed_batches_read(monkeypatch, tmp_path):
    """Batches 0-1 committed (ending at offset 4), batch 2 planned (to 6): ids 0-3 must be out
    once, ids 4-5 may be out once (a batch the sink wrote before Spark committed it), not twice."""
    ck = _checkpoint(tmp_path / "ck", "src", [2, 4, 6], committed=1)
    _topics(monkeypatch, src=_ids(8), dst=_ids(5))
    rep = verify({}, "src", "dst", checkpoint=ck)
    assert rep.ok and (rep.expected, rep.pending_input, rep.batches) == (4, 4, 2), rep.text()
    assert "read by 2 committed batches" in rep.text()

    _topics(monkeypatch, src=_ids(8), dst=_ids(3))  # id-3 was read by batch 1 and is not out
    lost = verify({}, "src", "dst", checkpoint=ck)
    assert not lost.ok and lost.missing == 1 and lost.examples["missing"] == ["id-3"], lost.text()

    _topics(monkeypatch, src=_ids(8), dst=[*_ids(5), FakeMessage(b"id-4", 0, 5)])
    twice = verify({}, "src", "dst", checkpoint=ck)
    assert not twice.ok and twice.duplicates == 1, twice.text()

    _topics(monkeypatch, src=_ids(8), dst=_ids(8))  # no checkpoint: every id, once
    assert verify({}, "src", "dst").expected == 8


def test_ids_against_a_checkpoint_with_no_committed_batch_check_nothing(monkeypatch, tmp_path):
    ck = _checkpoint(tmp_path / "ck", "src", [2], committed=-1)
    _topics(monkeypatch, src=_ids(3), dst=_ids(2))
    rep = verify({}, "src", "dst", checkpoint=ck)
    assert not rep.ok and rep.expected == 0, rep.text()
    assert "no committed batch of the checkpoint's offset log (0 committed)" in rep.text()


def test_cli_checks_ids_through_the_checkpoint(monkeypatch, tmp_path, capsys):
    ck = _checkpoint(tmp_path / "ck", "src", [2, 4], committed=1)
    _topics(monkeypatch, src=_ids(6), dst=_ids(4))
    assert run(["verify", "-b", "127.0.0.1:1", "--input", "src", "--output", "dst",
                "--checkpoint", ck, "--json"]) == 0
    assert '"with_checkpoint": true' in capsys.readouterr().out
