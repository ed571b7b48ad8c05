"""A df.write whose commit does not fully land: the error says it is partly committed (no log)."""

from __future__ import annotations

import pytest

from txkafka.connector.errors import TransactionError, TransactionLostError
from txkafka.connector.sink.committable import KafkaCommittable, TaskResult
from txkafka.connector.sink.committer import KafkaCommitter
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.sink.transactional_ids import TransactionalIdFactory

from tests.test_sink_core import FakeCoordinator

BATCH_OPTS = {"kafka.bootstrap.servers": "h:9092", "topic": "out"}


def _batch_write(fake):
    """A df.write: no commit log; commit() and abort() each run on a freshly unpickled writer."""
    cfg = SinkConfig.from_options(BATCH_OPTS, streaming=False)
    ids = TransactionalIdFactory("txkafka", "b1234abcd")
    return (lambda: KafkaCommitter(cfg, ids, None, client=fake)), ids


def _results(ids, fake, parts):
    out = []
    for p in parts:
        c = KafkaCommittable(ids.transactional_id(p, 0), 100 + p, 0, p, 0, 0, 5, {"out": [p]})
        fake.open(c)
        out.append(TaskResult(p, 0, 0, c, 5))
    return out


def test_batch_write_whose_commit_does_not_finish_says_it_is_partly_committed():
    fake = FakeCoordinator()
    committer, ids = _batch_write(fake)
    results = _results(ids, fake, [0, 1])
    fake.stuck.add(results[1].committable.transactional_id)  # its coordinator is unavailable
    with pytest.raises(TransactionError) as exc:
        committer().commit(0, results)
    fake.stuck.clear()
    committer().abort(0, results)  # Spark's V2 write calls abort() after commit() raised
    states = [fake.txns[r.committable.transactional_id]["state"] for r in results]
    assert states == ["CompleteCommit", "CompleteAbort"]  # half-committed: nothing completes it
    msg = str(exc.value)
    # There is no decision log for a batch write: nothing "completes it" later.
    assert "next attempt (or restart) completes it" not in msg
    assert "partly committed" in msg and "task partition 1" in msg


def test_batch_write_with_a_lost_transaction_does_not_promise_a_rerun_of_the_lost_partition():
    fake = FakeCoordinator()
    committer, ids = _batch_write(fake)
    results = _results(ids, fake, [0, 1])
    fake.fail_commit.add(results[1].committable.transactional_id)
    with pytest.raises(TransactionLostError) as exc:
        committer().commit(0, results)
    msg = str(exc.value)
    # Re-running a df.write writes every partition again: task partition 0 would be duplicated.
    assert "re-runs exactly these task partitions" not in msg
    assert "partly committed" in msg
