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
