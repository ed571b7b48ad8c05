"""Checkpoints that another sink wrote to as well: a query switched between Spark's built-in
``format("kafka")`` and txkafka on the same checkpoint.

Spark lets a query change its sink between runs, so the sink's commit log may see only some of
the checkpoint's batches. Two cases matter when the sink starts:

- Spark's ``commits/`` has batches the sink's log never saw (the query ran on another sink before,
  or in between): nothing to do, the sink is exact from the batch Spark plans now. Logged once.
- The sink's newest batch is decided but not committed (txkafka crashed in its commit), and Spark's
  ``commits/`` has that batch: another sink ran it again and finished it after the crash. Rolling
  the decision forward would commit a second copy of the batch, so the sink refuses while any of
  those transactions is still open (SupersededDecisionError, with the command that aborts them).
  Once none is open (aborted by the operator or the broker's timeout), the roll-forward only
  records what happened to them, and the query goes on.
"""

from __future__ import annotations

import logging

from ..client.transactions import TransactionClient
from ..errors import SupersededDecisionError
from ..secrets_redaction import redact_uri
from .commit_log import BatchState, SinkCommitLog

log = logging.getLogger(__name__)

_SAID: set[tuple[str, int]] = set()  # (log root, batch): said once per driver process


def note_batches_of_other_sinks(commit_log: SinkCommitLog, batch_id: int,
                                newest_recorded: int | None) -> None:
    """Log once that batches before ``batch_id`` were committed through another sink."""
    before = [b for b in commit_log.spark.committed_batch_ids()
              if b < batch_id and (newest_recorded is None or b > newest_recorded)]
    key = (commit_log.root, batch_id)
    if not before or key in _SAID:
        return
    _SAID.add(key)
    log.warning("batch %d: Spark's checkpoint %s has batches %d-%d that txkafka's sink did not "
                "write (the query ran on another sink, e.g. format('kafka')); txkafka writes "
                "exactly once from batch %d on", batch_id, redact_uri(commit_log.location),
                before[0], before[-1], batch_id)


def refuse_superseded_decision(commit_log: SinkCommitLog, state: BatchState,
                               client: TransactionClient) -> None:
    """Before a pending round is rolled forward: raise SupersededDecisionError when Spark
    committed its batch through another sink and a decided transaction is still open."""
    rnd = state.pending
    if rnd is None or not commit_log.spark.has_commit(state.batch_id):
        return
    descs = client.describe(c.transactional_id for c in rnd.decision)
    still_open = [c for c in rnd.decision
                  if (d := descs.get(c.transactional_id)) is not None and not d.error_code
                  and d.state == "Ongoing"
                  and (d.producer_id, d.producer_epoch) == (c.producer_id, c.producer_epoch)]
    ck = redact_uri(commit_log.location)
    if not still_open:
        log.warning("batch %d: decided by txkafka's sink but committed by Spark through another "
                    "sink (commits/%d); none of its %d transaction(s) is open any more, so none "
                    "is committed now", state.batch_id, state.batch_id, len(rnd.decision))
        return
    raise SupersededDecisionError(
        f"batch {state.batch_id}: txkafka's sink decided this batch (round {rnd.number}) and "
        f"stopped before committing it, and Spark has since committed batch {state.batch_id} "
        f"(commits/{state.batch_id} under {ck}) through another sink, for example "
        f"format('kafka') after a switch back: that sink wrote the batch's records again. "
        f"{len(still_open)} of the decided transactions are still open "
        f"({', '.join(c.transactional_id for c in still_open[:5])}); committing them would "
        f"write the batch a second time, so nothing is committed and the query stops. Abort "
        f"them, with this query stopped: `txkafka transactions abort -b <bootstrap> --checkpoint "
        f"{ck} --force --yes`, then restart the query (or wait for their "
        f"transaction.timeout.ms: the broker aborts them). docs/switching.md, 'Going back'.")
