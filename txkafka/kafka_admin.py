"""Plain Kafka chores for the tooling (tests, bench, verify, demo, pipeline): create topics, produce
inputs, read what read_committed readers see, and look up offsets.

One set of helpers for all of them, on confluent-kafka (no Spark, and of the connector only
the reader's fetch setting), so that a test, the benchmark and `txkafka verify` read and write Kafka the same way. Reads end at
partition EOF (the last stable offset under read_committed), never at a poll time-out: a slow
broker makes a read slow, not short.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Iterable, Iterator, Mapping, Sequence

from .connector.errors import TxKafkaError

# librdkafka's own log lines (connection refused while a broker starts...) stay out of the output.
QUIET = logging.getLogger("txkafka.librdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False

# The scans assign partitions and never join a group, but librdkafka still looks up the group's
# coordinator: on a cluster with ACLs the reading principal needs READ on this prefix.
VERIFY_GROUP_PREFIX = "txkafka-verify-"


def admin(conf: Mapping[str, Any]):
    """An AdminClient; keep the reference while its futures run (a collected one cancels them)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({**conf, "logger": QUIET})


def create_topic(conf: Mapping[str, Any], name: str, partitions: int = 1,
                 replication_factor: int = 1, config: Mapping[str, str] | None = None,
                 timeout_s: float = 60.0) -> str:
    """Create ``name`` and return once every partition has a leader."""
    from confluent_kafka.admin import NewTopic

    client = admin(conf)
    futures = client.create_topics(
        [NewTopic(name, partitions, replication_factor, config=dict(config or {}))],
        operation_timeout=min(30.0, timeout_s))
    for f in futures.values():
        f.result(timeout=timeout_s)
    wait_topic(conf, name, partitions, timeout_s=timeout_s)
    return name


def wait_topic(conf: Mapping[str, Any], name: str, partitions: int,
               timeout_s: float = 30.0) -> None:
    client = admin(conf)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        t = client.list_topics(name, timeout=10).topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {name} not ready with {partitions} partitions in {timeout_s:.0f}s")


def delete_topics(conf: Mapping[str, Any], names: Sequence[str],
                  timeout_s: float = 90.0) -> dict[str, Exception]:
    """Delete ``names``; returns the ones that failed with their error (never raises for them)."""
    failed: dict[str, Exception] = {}
    client = admin(conf)
    for name, f in client.delete_topics(list(names), operation_timeout=60).items():
        try:
            f.result(timeout_s)
        except Exception as e:  # noqa: BLE001 - reported to the caller
            failed[name] = e
    return failed


def partitions(conf: Mapping[str, Any], topic: str) -> list[int]:
    md = admin(conf).list_topics(topic, timeout=30)
    return sorted(md.topics[topic].partitions)


def watermarks(conf: Mapping[str, Any], topic: str,
               isolation: str = "read_committed") -> dict[int, tuple[int, int]]:
    """(low, high) per partition; under read_committed, high is the last stable offset."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**conf, "group.id": f"{VERIFY_GROUP_PREFIX}{uuid.uuid4().hex[:8]}",
                  "isolation.level": isolation, "logger": QUIET})
    try:
        parts = sorted(c.list_topics(topic, timeout=30).topics[topic].partitions)
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)
                for p in parts}
    finally:
        c.close()


def end_offsets(conf: Mapping[str, Any], topic: str,
                isolation: str = "read_committed") -> dict[int, int]:
    """The end of every partition: the last stable offset (read_committed) or high watermark."""
    return {p: hi for p, (_lo, hi) in watermarks(conf, topic, isolation).items()}


def producer(conf: Mapping[str, Any], transactional_id: str | None = None, **overrides: Any):
    """A producer that partitions keys as Java and Spark do (murmur2)."""
    from confluent_kafka import Producer

    c = {**conf, "partitioner": "murmur2_random", "logger": QUIET, "linger.ms": 5, **overrides}
    if transactional_id:
        c["transactional.id"] = transactional_id
    return Producer(c)


def _encode(x: Any) -> Any:
    return x.encode() if isinstance(x, str) else x


def send(p, topic: str, records: Iterable[tuple], headers: Sequence | None = None) -> int:
    """Queue (key, value[, partition[, timestamp_ms]]) tuples on ``p``, waiting while its queue
    is full; str keys and values are sent as UTF-8. Returns the count."""
    n = 0
    for rec in records:
        kwargs: dict[str, Any] = {}
        if len(rec) > 2 and rec[2] is not None:
            kwargs["partition"] = rec[2]
        if len(rec) > 3 and rec[3] is not None:
            kwargs["timestamp"] = rec[3]
        if headers is not None:
            kwargs["headers"] = list(headers)
        while True:
            try:
                p.produce(topic, _encode(rec[1]), _encode(rec[0]), **kwargs)
                break
            except BufferError:
                p.poll(0.05)
        n += 1
    return n


def produce(conf: Mapping[str, Any], topic: str, records: Iterable[tuple], *,
            transactional: bool = False, commit: bool = True,
            headers: Sequence | None = None) -> int:
    """Produce records (see :func:`send`), in one transaction on request (committed, or aborted
    with its records really written). Returns once the broker acknowledged all of them."""
    p = producer(conf, f"txkafka-feeder-{uuid.uuid4().hex[:10]}" if transactional else None)
    if transactional:
        p.init_transactions(30)
        p.begin_transaction()
    n = send(p, topic, records, headers)
    if not transactional:
        left = p.flush(30)
        if left:
            raise RuntimeError(f"{left} of {n} records to {topic} not delivered")
    elif commit:
        p.commit_transaction(30)
    else:
        # Flush first: librdkafka purges unsent records on abort, and the aborted records (and
        # the abort marker) must really be written to the log.
        p.flush(30)
        p.abort_transaction(30)
    return n


class OpenTransactionError(TxKafkaError, TimeoutError):
    """A topic to be read whole has a transaction open, or changed while it was read."""


def _ends(conf: Mapping[str, Any],
          topic: str) -> tuple[dict[int, int], dict[int, tuple[int, int]]]:
    """Each partition's high watermark, and those whose last stable offset is below it (a
    transaction open): ({p: HW}, {p: (LSO, HW)})."""
    stable, high = end_offsets(conf, topic), end_offsets(conf, topic, "read_uncommitted")
    return high, {p: (stable[p], hw) for p, hw in high.items() if p in stable and stable[p] < hw}


def settled_ends(conf: Mapping[str, Any], topic: str, timeout_s: float) -> dict[int, int]:
    """Wait until no transaction is open on ``topic``, then its high watermarks. A read_committed
    reader stops at the last stable offset: with a transaction open it would not see anything
    after it, committed records included, and a verdict on what it saw would hide them."""
    deadline = time.monotonic() + timeout_s
    while True:
        high, open_ = _ends(conf, topic)
        if not open_:
            return high
        if time.monotonic() > deadline:
            where = ", ".join(f"[{p}] from offset {lso} (end {hw})"
                              for p, (lso, hw) in sorted(open_.items())[:5])
            raise OpenTransactionError(
                f"{topic}: a transaction is still open after {timeout_s:.0f}s at {where}: "
                "read_committed readers see nothing after it, so the topic cannot be checked "
                "whole. Wait for it to end, or abort it (txkafka transactions list|abort)")
        time.sleep(0.5)


# A scan ends at each partition's EOF, which librdkafka reports only after a fetch that found
# nothing more: the broker holds such a fetch up to fetch.wait.max.ms (500 ms by default), a wait
# that bought a scan nothing and cost every small topic about a second.
SCAN_FETCH_WAIT_MS = 10


def scan_topic(conf: Mapping[str, Any], topic: str, timeout_s: float = 120.0,
               isolation: str = "read_committed", *, whole: bool = False) -> Iterator[Any]:
    """Every committed record of ``topic`` (confluent-kafka Messages), partition by partition up
    to the last stable offset (read_uncommitted: up to the high watermark, open transactions'
    records included). ``whole``: first wait until no transaction is open, and fail if the
    topic's end moved while it was read (a verdict needs every committed record)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    ends = settled_ends(conf, topic, timeout_s) if whole else None

    # librdkafka's default fetch.queue.backoff.ms idles a second per 100k queued records, however
    # fast they are taken: the value txkafka's reader uses; a caller's own value wins.
    from .connector.source.options import FETCH_QUEUE_BACKOFF_MS
    from .connector.source.range_reader import next_messages

    c = Consumer({"fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
                  "fetch.wait.max.ms": SCAN_FETCH_WAIT_MS, **conf,
                  "group.id": f"{VERIFY_GROUP_PREFIX}{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": isolation, "logger": QUIET})
    try:
        md = c.list_topics(topic, timeout=30)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            raise SystemExit(f"error: topic {topic!r} not found ({t.error if t else 'no metadata'})")
        parts = sorted(t.partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        pending = set(parts)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic}: partitions {sorted(pending)} did not reach their end in "
                    f"{timeout_s:.0f}s (an open transaction blocks read_committed readers)"
                )
            # (consume(n, timeout) alone would wait out its timeout: EOF events never make up n)
            for m in next_messages(c, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                        continue
                    raise KafkaException(err)
                yield m
        if ends is not None and _ends(conf, topic) != (ends, {}):
            raise OpenTransactionError(
                f"{topic}: its end moved while it was read (a writer, or a transaction opened): "
                "check it again once nothing writes to it")
    finally:
        c.close()
