"""Kafka's error codes that txkafka acts on, named once for every module.

The numbers are confluent_kafka.KafkaError's (Kafka's broker codes, and librdkafka's local codes,
which are negative); tests/test_kafka_error_codes.py checks each against KafkaError. They are
written out rather than read from KafkaError because the driver's commit path and the executors'
own fetch never import confluent_kafka (~40 ms per Python worker that does not need librdkafka).
"""

from __future__ import annotations

# librdkafka's local codes.
_AUTHENTICATION = -169
_SSL = -181
_TRANSPORT = -195
_ALL_BROKERS_DOWN = -187
_TIMED_OUT = -185
_MSG_TIMED_OUT = -192
_INVALID_ARG = -186

# Kafka's broker codes.
NONE = 0                                   # KafkaError.NO_ERROR
UNKNOWN_TOPIC_OR_PARTITION = 3             # KafkaError.UNKNOWN_TOPIC_OR_PART
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6                 # KafkaError.NOT_LEADER_FOR_PARTITION (its old name)
REQUEST_TIMED_OUT = 7
REPLICA_NOT_AVAILABLE = 9
MESSAGE_TOO_LARGE = 10                     # KafkaError.MSG_SIZE_TOO_LARGE
NETWORK_EXCEPTION = 13
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_TIMESTAMP = 32
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
PRODUCER_FENCED = 90
# Not in confluent-kafka 2.16's KafkaError (Kafka 3.0, KIP-664): DescribeTransactions' answer for
# an id the coordinator does not know.
TRANSACTIONAL_ID_NOT_FOUND = 105


# What a Produce refused with INVALID_TIMESTAMP means for the sink, whose records carry the
# executor's clock as their CreateTime (both producers, as Spark's sink).
INVALID_TIMESTAMP_HINT = (
    "the broker refused the records' timestamps (INVALID_TIMESTAMP). A record's CreateTime is the "
    "clock of the executor that wrote it, and a topic refuses one more than "
    "message.timestamp.after.max.ms ahead of its leader broker's clock (1 hour by default since "
    "Kafka 4.0) or more than message.timestamp.before.max.ms behind it: synchronise the clocks of "
    "the executors and the brokers (NTP), or raise those settings of the topic")


def error_name(code: int) -> str:
    """Kafka's name for an error code, from librdkafka's table (imported only to name an error)."""
    try:
        from confluent_kafka import KafkaError

        return KafkaError(code).name()
    except Exception:  # noqa: BLE001 - naming only
        return f"ERROR_{code}"
