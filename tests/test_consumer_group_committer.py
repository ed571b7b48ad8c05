"""Publishing offsets to a consumer group (monitoring only) never slows the query for long."""

from txkafka.connector.source.group_offsets import ConsumerGroupCommitter
from txkafka.connector.source.options import parse_source_options

OPTS = parse_source_options({"kafka.bootstrap.servers": "h:9", "subscribe": "t",
                             "kafka.group.id": "lag", "commitOffsetsToGroup": "true"},
                            streaming=True)


class _DownAdmin:
    def __init__(self):
        self.calls = 0

    def alter_consumer_group_offsets(self, requests, request_timeout):
        self.calls += 1
        assert request_timeout <= 5  # inside Spark's planning of a batch: short
        raise RuntimeError("coordinator not available")


def test_after_a_failure_it_backs_off_instead_of_blocking_every_trigger():
    admin, now = _DownAdmin(), [100.0]
    c = ConsumerGroupCommitter(OPTS, lambda: admin, clock=lambda: now[0])
    assert c.commit({("t", 0): 5}) is False and admin.calls == 1
    now[0] += 10
    assert c.commit({("t", 0): 6}) is False and admin.calls == 1  # still backing off
    now[0] += 6
    assert c.commit({("t", 0): 7}) is False and admin.calls == 2  # tried again, then longer
    now[0] += 20
    assert c.commit({("t", 0): 8}) is False and admin.calls == 2
    now[0] += 11
    c.commit({("t", 0): 9})
    assert admin.calls == 3 and c.last_committed == {}


class _MovingCoordinator:
    """The group's coordinator moved (a broker restart): NOT_COORDINATOR, then the new one."""

    def __init__(self, moved_answers: int, per_partition: bool = False):
        self.calls = 0
        self.moved_answers = moved_answers
        self.per_partition = per_partition

    def alter_consumer_group_offsets(self, requests, request_timeout):
        from concurrent.futures import Future

        from confluent_kafka import KafkaError, KafkaException

        self.calls += 1
        fut: Future = Future()
        moved = self.calls <= self.moved_answers
        if moved and not self.per_partition:
            fut.set_exception(KafkaException(KafkaError(KafkaError.NOT_COORDINATOR)))
        else:
            error = KafkaError(KafkaError.NOT_COORDINATOR) if moved else None
            tps = [type("TP", (), {"topic": tp.topic, "partition": tp.partition, "error": error})()
                   for tp in requests[0].topic_partitions]
            fut.set_result(type("Result", (), {"topic_partitions": tps})())
        return {requests[0].group_id: fut}


def test_a_coordinator_that_moved_is_asked_again_within_the_timeout(monkeypatch):
    from txkafka.connector.source import group_offsets as consumer_group_committer

    monkeypatch.setattr(consumer_group_committer, "_RETRY_BACKOFF_S", 0.0)
    for per_partition in (False, True):
        admin = _MovingCoordinator(moved_answers=2, per_partition=per_partition)
        c = ConsumerGroupCommitter(OPTS, lambda: admin)
        assert c.commit({("t", 0): 5}) is True and admin.calls == 3
        assert c.last_committed == {("t", 0): 5}
