"""``txkafka commit-log resolve``: the operator's way out of an unknown transaction outcome.

The committer stops the query when the coordinator forgot a decided transaction's id; these tests
drive that with the fake coordinator of test_sink_core and check that the operator's answer makes
the next run rewrite exactly the lost partitions, or nothing.
"""

from __future__ import annotations

import os

import pytest

from tests.test_sink_core import FakeCoordinator, _committer, _decide_then_crash, _spark_offsets
from txkafka.cli import main
from txkafka.connector.errors import TransactionOutcomeUnknownError
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.client.error_codes import INVALID_PRODUCER_ID_MAPPING


def _stopped(tmp_path, forgotten=(1,), batch=5, parts=(0, 1, 2)):
    """Batch ``batch`` decided, the driver down long enough for the ``forgotten`` task partitions'
    ids to expire; task partition 0 had committed, the rest timed out. The restart stops."""
    fake = FakeCoordinator()
    ids, log, txns = _decide_then_crash(tmp_path, fake, batch, list(parts))
    for c in txns:
        if c.partition_id in forgotten:
            fake.forgotten[c.transactional_id] = INVALID_PRODUCER_ID_MAPPING
        else:
            fake.txns[c.transactional_id]["state"] = ("CompleteCommit" if c.partition_id == 0
                                                      else "CompleteAbort")
    with pytest.raises(TransactionOutcomeUnknownError):
        _committer(tmp_path, fake)[0].recover()
    return fake, log, {c.partition_id: c.transactional_id for c in txns}


def _resolve(tmp_path, *args):
    return main(["commit-log", "resolve", "--checkpoint", str(tmp_path), "--batch", "5", *args])


def _plan_after_restart(tmp_path, fake):
    """The restart plans batch 5 again: its offsets/5 is the newest Spark logged."""
    _spark_offsets(tmp_path, 5, '{"in":{"0":50}}')
    return _committer(tmp_path, fake)[0].plan()


def test_lost_rewrites_the_unknown_and_the_timed_out_partitions(tmp_path, capsys):
    fake, log, tids = _stopped(tmp_path)
    assert _resolve(tmp_path, "--lost") == 0  # dry run
    assert "would mark 1 transaction(s)" in capsys.readouterr().out
    assert log.latest().pending is not None
    assert _resolve(tmp_path, "--lost", "--yes") == 0
    outcome = log.latest().last.outcome
    assert outcome["committed"] == [tids[0]]
    assert outcome["resolved_by_operator"] == {tids[1]: "lost"}
    plan = _plan_after_restart(tmp_path, fake)
    assert [p for p in range(3) if plan.should_write(5, p)] == [1, 2]


def test_committed_rewrites_only_what_the_broker_aborted(tmp_path):
    fake, log, tids = _stopped(tmp_path)
    assert _resolve(tmp_path, "--committed", "--yes") == 0
    assert sorted(log.latest().last.outcome["committed"]) == sorted([tids[0], tids[1]])
    plan = _plan_after_restart(tmp_path, fake)
    assert [p for p in range(3) if plan.should_write(5, p)] == [2]


def test_committed_everything_completes_the_batch(tmp_path):
    fake, log, tids = _stopped(tmp_path, forgotten=(1, 2))
    assert _resolve(tmp_path, "--committed", "--yes") == 0
    assert log.latest().complete
    assert not any(_plan_after_restart(tmp_path, fake).should_write(5, p) for p in range(3))


def test_per_id_answers_accumulate_and_the_restart_honours_them(tmp_path):
    fake, log, tids = _stopped(tmp_path, forgotten=(1, 2))
    assert _resolve(tmp_path, "--committed", "--transactional-id", tids[1], "--yes") == 0
    assert log.latest().pending is not None  # task partition 2 is still undetermined
    with pytest.raises(TransactionOutcomeUnknownError) as exc:
        _committer(tmp_path, fake)[0].recover()
    assert tids[2] in str(exc.value) and tids[1] not in str(exc.value)
    assert _resolve(tmp_path, "--lost", "--id", tids[2], "--yes") == 0
    plan = _plan_after_restart(tmp_path, fake)
    assert [p for p in range(3) if plan.should_write(5, p)] == [2]


def test_refuses_a_batch_without_a_pending_round(tmp_path):
    fake, log, tids = _stopped(tmp_path)
    with pytest.raises(SystemExit, match="batch 4 has no records"):
        main(["commit-log", "resolve", "--checkpoint", str(tmp_path), "--batch", "4", "--lost"])
    assert _resolve(tmp_path, "--lost", "--yes") == 0
    with pytest.raises(SystemExit, match="batch 5 has an outcome already in .*: nothing to resolve"):
        _resolve(tmp_path, "--committed", "--yes")


def test_refuses_an_id_that_is_not_undetermined(tmp_path):
    fake, log, tids = _stopped(tmp_path)
    with pytest.raises(SystemExit, match=f"--transactional-id {tids[0]}: not an undetermined transaction"):
        _resolve(tmp_path, "--lost", "--id", tids[0], "--yes")
    assert log.latest().pending is not None


def test_refuses_a_round_whose_commit_can_still_finish(tmp_path):
    fake = FakeCoordinator()
    _decide_then_crash(tmp_path, fake, 5, [0])  # decided, never found unknown
    with pytest.raises(SystemExit, match="restart the query and it completes the commit itself"):
        _resolve(tmp_path, "--lost", "--yes")
    log = SinkCommitLog(str(tmp_path))
    assert not os.path.exists(log._unresolved_name(5, 0)) and log.latest().pending is not None


def test_show_flags_the_unknown_outcome(tmp_path, capsys):
    _stopped(tmp_path)
    assert main(["commit-log", "show", "--checkpoint", str(tmp_path)]) == 0
    assert "OUTCOME UNKNOWN" in capsys.readouterr().out
