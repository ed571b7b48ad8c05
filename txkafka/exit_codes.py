"""The exit statuses of every txkafka command: one table, which the commands return, ``txkafka
--help`` prints and docs/operations-reference.md lists (tests/test_docs_reference.py keeps them in
step).

A script tells the cases apart by number alone: a failed check (1) is not a typo (2), a query that
needs an operator's decision (3) is not a cluster that does not answer (4).
"""

from __future__ import annotations

from .connector import errors

OK = 0
FINDINGS = 1
USAGE = 2
NEEDS_OPERATOR = 3
UNREACHABLE = 4

MEANINGS: dict[int, str] = {
    OK: "done; a dry run that changed nothing; a check that passed",
    FINDINGS: "a check found a problem (verify, demo), or an action was only partly done",
    USAGE: "the command line is wrong: an unknown option, a bad value, a malformed setting",
    NEEDS_OPERATOR: "refused until an operator acts: the broker or query is not in the state the "
                    "command needs (not running, still running, an unknown outcome, a copied "
                    "checkpoint, a decided batch)",
    UNREACHABLE: "cannot read the checkpoint or savepoint, or cannot reach or use the cluster",
}


def epilog() -> str:
    """The table as ``--help`` shows it, wrapped to a terminal's width."""
    import textwrap

    return "exit status:\n" + "\n".join(
        textwrap.fill(text, 79, initial_indent=f"  {code}  ", subsequent_indent=" " * 5)
        for code, text in MEANINGS.items())


def for_error(e: errors.TxKafkaError) -> int:
    """The status of a typed error that stops a command."""
    if isinstance(e, errors.UnsupportedBrokerError):
        return UNREACHABLE
    if isinstance(e, errors.KafkaConfigError):
        return USAGE
    if isinstance(e, (errors.CheckpointMismatchError, errors.TransactionOutcomeUnknownError,
                      errors.TaskLayoutChangedError, errors.SavepointError,
                      errors.ConcurrentWriterError)):
        return NEEDS_OPERATOR
    if isinstance(e, (errors.KafkaProtocolError, errors.KafkaAuthorizationError,
                      errors.OffsetsUnavailableError, errors.CommitLogError,
                      errors.NewerFormatError, errors.TransactionError, errors.DataLossError)):
        return UNREACHABLE
    return FINDINGS
