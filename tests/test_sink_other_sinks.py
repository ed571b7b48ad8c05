"""The sink on a checkpoint that another sink (Spark's format("kafka")) wrote to as well: a query
switched to txkafka, or back and forth. No broker: the committer's decisions against a fake
coordinator; the same switches with real Spark and Kafka: integration_tests/test_switching.py.
"""

from __future__ import annotations

import logging

import pytest

from tests.spark_checkpoint_files import write_commits, write_metadata, write_offsets
from tests.test_sink_core import FakeCoordinator, _committer, _decide_then_crash, _results
from txkafka.connector.errors import SupersededDecisionError
from txkafka.connector.sink import other_sinks


def test_first_start_after_another_sink_writes_the_planned_batch_and_says_so(tmp_path, caplog):
    """Spark's built-in sink ran batches 0-4, then the query restarted on txkafka: batch 5 is
    written in full, and the batches before it are named as another sink's."""
    write_metadata(tmp_path)
    for b in range(6):
        write_offsets(tmp_path, b, f'{{"in":{{"0":{10 * (b + 1)}}}}}')
    write_commits(tmp_path, *range(5))
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    with caplog.at_level(logging.WARNING, logger=other_sinks.__name__):
        plan = committer.plan()
    assert plan.batch_id == 5 and not plan.skip and plan.redo is None
    assert "batches 0-4 that txkafka's sink did not write" in caplog.text
    committer.commit(5, _results(ids, fake, 5, [0, 1]))
    assert log.latest().complete


def test_a_crashed_builtin_batch_is_written_once_by_txkafka(tmp_path):
    """Spark's sink crashed in batch 3 (offsets/3, no commits/3): txkafka writes all of batch 3."""
    write_metadata(tmp_path)
    for b in range(4):
        write_offsets(tmp_path, b, f'{{"in":{{"0":{10 * (b + 1)}}}}}')
    write_commits(tmp_path, 0, 1, 2)
    committer, _, _ = _committer(tmp_path, FakeCoordinator())
    plan = committer.plan()
    assert plan.batch_id == 3 and all(plan.should_write(3, p) for p in range(3))


def test_a_decided_batch_another_sink_committed_is_not_committed_again(tmp_path):
    """txkafka decided batch 2 and crashed before EndTxn; the query then ran batch 2 on Spark's
    sink (commits/2). Rolling forward would write batch 2 twice: refused while the decided
    transactions are open, with the command that aborts them; once aborted, the query goes on."""
    write_metadata(tmp_path)
    write_offsets(tmp_path, 2, '{"in":{"0":20}}')
    fake = FakeCoordinator()
    ids, log, decided = _decide_then_crash(tmp_path, fake, 2, [0, 1])
    write_commits(tmp_path, 2)  # Spark's built-in sink finished batch 2
    write_offsets(tmp_path, 3, '{"in":{"0":30}}')
    committer, _, _ = _committer(tmp_path, fake)
    with pytest.raises(SupersededDecisionError,
                       match=r"batch 2: .*commits/2.*transactions abort .*--force --yes"):
        committer.plan()
    assert all(fake.txns[c.transactional_id]["state"] == "Ongoing" for c in decided)
    assert not [c for c in fake.calls if c[0] == "commit"]  # nothing was committed
    # The operator aborts them (txkafka transactions abort --force): the restart goes on.
    fake.end_many([c.key for c in decided], commit=False)
    plan = committer.plan()
    assert plan.batch_id == 3 and not plan.skip
    assert all(fake.txns[c.transactional_id]["state"] == "CompleteAbort" for c in decided)


def test_a_decided_batch_spark_did_not_commit_is_rolled_forward_as_before(tmp_path):
    """The check applies only to batches Spark committed through another sink: a plain crash
    after the decision is still rolled forward."""
    write_metadata(tmp_path)
    write_offsets(tmp_path, 2, '{"in":{"0":20}}')
    fake = FakeCoordinator()
    ids, log, decided = _decide_then_crash(tmp_path, fake, 2, [0, 1])
    committer, _, _ = _committer(tmp_path, fake)
    plan = committer.plan()
    assert plan.skip
    assert all(fake.txns[c.transactional_id]["state"] == "CompleteCommit" for c in decided)
