"""Operator commands refuse what they cannot do safely, before contacting any broker.

(Against a real broker and a crashed query they are tested in integration_tests:
test_writer_exactly_once.py and test_security_pipeline.py.)
"""

from __future__ import annotations

import json

import pytest

from txkafka.cli import main
from txkafka.connector.sink.commit_log import SinkCommitLog

NO_BROKER = "127.0.0.1:1"  # nothing listens: a command that got this far would hang or fail


@pytest.mark.parametrize("command", [
    ["transactions", "list", "-b", NO_BROKER],
    ["transactions", "abort", "-b", NO_BROKER, "--yes"],
    ["commit-log", "show"],
])
def test_a_checkpoint_without_a_sink_is_an_error_and_stays_untouched(tmp_path, command):
    typo = tmp_path / "checkpoints" / "my-qeury"
    with pytest.raises(SystemExit) as exc:
        main([*command, "--checkpoint", str(typo)])
    message = str(exc.value.code)
    assert "--checkpoint" in message and "sink.json does not exist" in message
    assert str(typo) in message
    assert not typo.exists()  # no new, empty sink was created there


def test_commit_log_show_reads_an_existing_sink(tmp_path, capsys):
    ck = tmp_path / "ck"
    ident = SinkCommitLog(str(ck)).identity("orders")
    assert main(["commit-log", "show", "--checkpoint", str(ck), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == {"sink_id": ident.sink_id, "batches": []}
    assert main(["commit-log", "show", "--checkpoint", str(ck)]) == 0
    assert f"sink {ident.sink_id} (prefix 'orders')" in capsys.readouterr().out


def test_abort_by_prefix_alone_needs_force(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["transactions", "abort", "-b", NO_BROKER, "--prefix", "txkafka-1a2b3c4d-", "--yes"])
    message = str(exc.value.code)
    assert "--prefix alone" in message and "--checkpoint" in message and "--force" in message


def test_neither_checkpoint_nor_prefix_is_an_error():
    with pytest.raises(SystemExit) as exc:
        main(["transactions", "list", "-b", NO_BROKER])
    assert "give --checkpoint" in str(exc.value.code)
