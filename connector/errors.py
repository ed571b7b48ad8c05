"""Typed errors. Each message says what happened, where (option, topic, partition, batch) and what to do."""

from __future__ import annotations


class TxKafkaError(Exception):
    """Base class of every error txkafka raises on purpose."""


class KafkaConfigError(TxKafkaError, ValueError):
    """An option is missing, malformed or not allowed; raised when the query starts."""


class KafkaProtocolError(TxKafkaError):
    """A broker could not be reached, or answered in a way we could not use."""


class KafkaAuthenticationError(KafkaProtocolError):
    """TLS or SASL failed: wrong CA, certificate, mechanism, user or password."""


class KafkaAuthorizationError(TxKafkaError):
    """The principal lacks an ACL; the message names the resource and the operation."""


class TransactionError(TxKafkaError):
    """A transaction could not be prepared, validated, committed or aborted."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class TransactionLostError(TransactionError):
    """A decided transaction was aborted by the broker before its commit landed (timeout, fencing).

    The sink records the lost partitions in its commit log; restarting the query re-runs them.
    """


class TransactionOutcomeUnknownError(TransactionError):
    """The coordinator no longer knows a decided transaction's id, so nobody can tell whether its
    commit landed (e.g. ``transactional.id.expiration.ms`` passed while the query was down).

    No outcome is recorded and the query stops: marking it lost could duplicate its records, marking
    it committed could lose them. The operator checks the output and records the answer with
    ``txkafka commit-log resolve``; the next run continues from there.
    """


class CommitLogError(TxKafkaError):
    """The sink's commit log is unreadable or inconsistent."""


class DataLossError(TxKafkaError):
    """Offsets the query needs are gone (retention, deleted topic) or went backwards."""


class OffsetsUnavailableError(TxKafkaError):
    """Offsets could not be fetched within the bounded number of retries."""


class RecordFetchTimeoutError(TxKafkaError, TimeoutError):
    """An executor got no records of its offset range for ``kafkaConsumer.pollTimeoutMs``."""
