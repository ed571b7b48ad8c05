"""Typed errors. Each message says what happened, where (option, topic, partition, batch) and what to do."""

from __future__ import annotations


class TxKafkaError(Exception):
    """Base class of every error txkafka raises on purpose."""


class KafkaConfigError(TxKafkaError, ValueError):
    """An option is missing, malformed or not allowed; raised when the query starts."""


class KafkaProtocolError(TxKafkaError):
    """A broker could not be reached, or answered in a way we could not use."""


class BrokersUnavailableError(KafkaProtocolError):
    """A request any broker can answer (Metadata) found no broker that did: each known broker was
    asked in turn, round after round, until the call's deadline. ``brokers`` lists the brokers
    asked (``host:port``); the message names each with its last failure."""

    def __init__(self, message: str, brokers: tuple[str, ...] = ()) -> None:
        # The default: unpickling calls the class with the message only, then restores the field.
        super().__init__(message)
        self.brokers = brokers


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
    """Offsets could not be fetched within the bounded number of retries, or the brokers'
    metadata answers kept disagreeing on whether a partition the query reads exists."""


class MalformedRecordError(TxKafkaError, ValueError):
    """A record cannot be given to Spark as it is: its timestamp is beyond what Spark's
    microsecond timestamps hold (a producer that wrote micro- or nanoseconds)."""


class RecordFetchTimeoutError(TxKafkaError, TimeoutError):
    """An executor got no records of its offset range for ``kafkaConsumer.pollTimeoutMs``."""


class CheckpointMismatchError(TxKafkaError):
    """Spark's checkpoint and the sink's commit log disagree about what a batch read.

    Spark planned a batch id the sink already decided or committed, with other source offsets than
    the sink recorded (a checkpoint rolled back, partly deleted, edited or copied from another
    query). Writing would duplicate or skip records, so nothing is written; the message names the
    batch, both offset sets and the recovery path (docs/operations.md).
    """


class CheckpointMovedError(CheckpointMismatchError):
    """The sink's commit log was recorded for a checkpoint at another place: the checkpoint was
    moved, or copied to run a second query beside the first. A copy shares the sink id, and so the
    transactional ids, and each query's clean-up would abort the other's open transactions, so the
    query stops before any task writes. The message names both places and both ways on: ``txkafka
    commit-log moved`` after a move, a new checkpoint for a copy (docs/operations.md).
    """


class TaskLayoutChangedError(TransactionError):
    """A batch whose decided transactions the broker aborted was re-run with another task layout
    (task partitions, or rows per partition): re-writing only some partitions would lose or repeat
    records, so nothing of the re-run is committed. The message names the setting to restore."""


class ConcurrentWriterError(CommitLogError):
    """Another driver wrote a record this driver was about to write (two live queries on one
    checkpoint): this one stops without deciding or committing anything."""


class CheckpointStoreError(CommitLogError):
    """The checkpoint's object store refused the sink's credentials, did not answer at its
    endpoint, has no such bucket, or the library the sink's exclusive creates need (the s3 extra)
    is missing; raised when the query or command starts. Never carries a secret."""


class UnsupportedBrokerError(KafkaConfigError):
    """The cluster lacks a broker feature the exactly-once sink depends on: Kafka transactions,
    DescribeTransactions or ListTransactions, or transaction partition verification (Kafka 3.6+)
    on or at least readable; raised when the query starts, before any transaction opens. The
    message names the cluster, what is missing on which broker, and the alternatives
    (``deliveryGuarantee=at_least_once``).

    ``cluster`` (the bootstrap servers) and ``missing`` (the features, as the message names them)
    are kept for callers.
    """

    def __init__(self, message: str, *, cluster: str = "",
                 missing: tuple[str, ...] = ()) -> None:
        # Defaults: unpickling calls the class with the message only, then restores the fields.
        super().__init__(message)
        self.cluster = cluster
        self.missing = missing


class SavepointError(TxKafkaError):
    """A savepoint cannot be created: the query still looks alive, the sink has a batch whose
    outcome is unknown or whose lost partitions await a re-run, the checkpoint has no txkafka sink
    or no Kafka-shaped source offsets, or the output file exists. Nothing was written."""


class NewerFormatError(TxKafkaError):
    """A file was written by a newer txkafka, in a format this one does not read: a checkpoint's
    commit log record or source offset, or a savepoint, after a downgrade. Raised before anything
    is acted on; the message names the file, both format versions and the txkafka that wrote it.

    ``file``, ``found`` (the file's format), ``supported`` (the newest this txkafka reads) and
    ``written_by`` (the writer's version, None when the file does not say) are kept for callers.
    """

    def __init__(self, message: str, *, file: str = "", found: int = 0, supported: int = 0,
                 written_by: str | None = None) -> None:
        # Defaults: unpickling calls the class with the message only, then restores the fields.
        super().__init__(message)
        self.file = file
        self.found = found
        self.supported = supported
        self.written_by = written_by


class SchemaFormatError(KafkaConfigError):
    """A record format's schema cannot be used (unparsable, a construct the format's Arrow type
    cannot hold, a message it does not define) or values do not fit it; raised when the codec is
    made or a column is written. Bad single payloads are reported per row, not raised."""


class SchemaRegistryError(TxKafkaError):
    """The Schema Registry did not answer within the bounded retries, or refused a request (an
    unknown subject, version or schema id, a schema it finds incompatible, denied credentials).
    The message names the registry's URL (never its credentials) and the request."""


class SchemaNotFoundError(SchemaRegistryError):
    """The registry answered that it has no such schema id, subject or version (HTTP 404)."""


class RecordFormatError(TxKafkaError, ValueError):
    """A key or value does not fit its format: no magic byte, an unknown schema id, a payload that
    does not decode (reader), or a struct that does not fit the schema (writer), under mode
    FAILFAST. The message names the topic, partition and offset (reader) and what was wrong."""


class AvroSchemaError(SchemaFormatError):
    """An Avro schema txkafka cannot use: not valid Avro JSON, a type Spark has no column for
    (a recursive record), a reader schema that does not resolve against the writer's, or a column
    whose Arrow type does not fit the schema it is written with."""


class SupersededDecisionError(CheckpointMismatchError):
    """The sink's newest batch is decided but not committed, and Spark committed that batch through
    another sink since (a query switched to ``format("kafka")`` after a crash, then back): its
    decided transactions are still open, and committing them would write the batch twice. The
    message names them and the command that aborts them."""
