"""Publishing a committed batch's end offsets to a consumer group, for lag monitoring only.

Why: lag tools (``kafka-consumer-groups.sh``, Burrow, Cruise Control, cloud consoles) read committed
group offsets; the reader's real offsets live in Spark's checkpoint and are never read back from
Kafka. Like Flink's "commit offsets on checkpoint", the reader commits the end offsets of every batch
Spark has committed (option ``commitOffsetsToGroup=true`` with ``kafka.group.id``). A failure here is
logged and never fails the query: it cannot affect what the query reads. An answer that the group's
coordinator moved or is loading (a broker restart) is retried within the call's short timeout.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from .offsets import PartitionOffsets
from ..secrets_redaction import redact_text
from .options import SourceOptions, TopicPartitionKey

log = logging.getLogger("txkafka.reader")

# Answers after which the commit is sent again (to the group's coordinator as looked up anew).
_RETRIABLE = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
              KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.REQUEST_TIMED_OUT,
              KafkaError._TRANSPORT, KafkaError._TIMED_OUT}
_RETRY_BACKOFF_S = 0.5


def _retriable(e: BaseException) -> bool:
    err = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return isinstance(err, KafkaError) and (err.code() in _RETRIABLE or err.retriable())


class ConsumerGroupCommitter:
    """Commits offsets for ``options.group_id`` through the AdminClient (the group has no members:
    the reader assigns partitions, it never joins the group)."""

    def __init__(self, options: SourceOptions, admin: Callable[[], AdminClient],
                 timeout_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self._admin = admin
        self.timeout_s = timeout_s  # short: the call runs inside Spark's planning of a batch
        self.last_committed: PartitionOffsets = {}
        self._clock = clock
        self._failures = 0
        self._retry_at = 0.0

    def commit(self, offsets: Mapping[TopicPartitionKey, int]) -> bool:
        """Commit ``offsets`` (next offsets to read, as Kafka expects); True if the broker took them."""
        if not self.options.commit_offsets_to_group or not offsets:
            return False
        if self._clock() < self._retry_at:
            return False  # backing off after a failure: monitoring must not slow every trigger
        group = self.options.group_id
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, int(off)) for (t, p), off in sorted(offsets.items())])
        deadline = self._clock() + self.timeout_s
        try:
            while True:
                try:
                    self._commit_once(request, max(0.5, deadline - self._clock()))
                    break
                except KafkaException as e:
                    if not _retriable(e) or self._clock() + _RETRY_BACKOFF_S >= deadline:
                        raise
                    time.sleep(_RETRY_BACKOFF_S)
        except Exception as e:  # noqa: BLE001 - monitoring only: never fail the query
            self._failures += 1
            wait = min(300.0, 15.0 * 2 ** (self._failures - 1))
            self._retry_at = self._clock() + wait
            log.warning("could not commit offsets to consumer group %r (monitoring only; the "
                        "query goes on; next attempt in %.0f s or later): %s", group, wait,
                        redact_text(str(e), self.options.client_conf))
            return False
        self._failures = 0
        self.last_committed = dict(offsets)
        return True

    def _commit_once(self, request: ConsumerGroupTopicPartitions, timeout_s: float) -> None:
        futures = self._admin().alter_consumer_group_offsets([request], request_timeout=timeout_s)
        for fut in futures.values():
            result = fut.result(timeout=timeout_s + 5)
            for tp in result.topic_partitions or []:
                if tp.error is not None:
                    # A partition's own answer, e.g. NOT_COORDINATOR: classified like the call's.
                    raise KafkaException(tp.error)
