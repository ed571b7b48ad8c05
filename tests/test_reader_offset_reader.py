"""Driver-side look-ups against a scripted AdminClient: retries, vanished partitions, resolving
startingOffsets/endingOffsets/timestamps; plus a real librdkafka client against nothing (bounded)."""

from concurrent.futures import Future

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from txkafka.connector.errors import KafkaConfigError, OffsetsUnavailableError
from txkafka.connector.source.offset_reader import KafkaOffsetReader
from txkafka.connector.source.options import parse_source_options


class _Topic:
    def __init__(self, partitions):
        self.partitions = {p: None for p in partitions}
        self.error = None


class _Metadata:
    def __init__(self, topics):
        self.topics = {t: _Topic(ps) for t, ps in topics.items()}


class _Result:
    def __init__(self, offset):
        self.offset = offset


class ScriptedAdmin:
    """Metadata from a dict; ListOffsets answers from per-spec functions or scripted errors."""

    def __init__(self, topics, earliest=None, latest=None, high=None, by_ts=None, errors=None):
        self.topics = topics
        self.answers = {"earliest": earliest or {}, "latest": latest or {}, "high": high or {},
                        "ts": by_ts or {}}
        self.errors = list(errors or [])  # per call: {(t, p): KafkaError code}
        self.calls = 0

    def list_topics(self, timeout=None):
        return _Metadata(self.topics)

    def list_offsets(self, specs, isolation_level=None, request_timeout=None):
        self.calls += 1
        errs = self.errors.pop(0) if self.errors else {}
        out = {}
        for tp, spec in specs.items():
            key = (tp.topic, tp.partition)
            fut: Future = Future()
            if key in errs:
                fut.set_exception(KafkaException(KafkaError(errs[key])))
            else:
                kind = _kind(spec, isolation_level)
                if kind == "ts":
                    fut.set_result(_Result(self.answers["ts"].get(key, -1)))
                else:
                    fut.set_result(_Result(self.answers[kind][key]))
            out[tp] = fut
        return out


def _kind(spec, isolation):
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    # The spec classes are not exported; the factories' results give them.
    if isinstance(spec, type(OffsetSpec.earliest())):
        return "earliest"
    if isinstance(spec, type(OffsetSpec.latest())):
        return "high" if isolation == IsolationLevel.READ_UNCOMMITTED else "latest"
    return "ts"


def reader(admin, **opts):
    options = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                    "fetchOffset.retryIntervalMs": "0", **opts}, streaming=True)
    return KafkaOffsetReader(options, admin_factory=lambda conf: admin)


TWO = {"t": [0, 1], "other": [0]}


def test_subscribe_pattern_and_assign_discovery():
    admin = ScriptedAdmin({"t": [1, 0], "t2": [0], "__consumer_offsets": [0], "x": [0]})
    assert reader(admin).topic_partitions() == [("t", 0), ("t", 1)]
    r = KafkaOffsetReader(parse_source_options(
        {"kafka.bootstrap.servers": "h:1", "subscribePattern": "t.*|__.*"}, streaming=True),
        admin_factory=lambda conf: admin)
    assert r.topic_partitions() == [("t", 0), ("t", 1), ("t2", 0)]  # internal topics excluded
    # Spark's rule: a match anywhere in the name (its admin strategy's findFirstIn), so a pattern
    # written for format("kafka") reads the same topics; anchors make it whole-name.
    admin = ScriptedAdmin({"orders": [0], "orders-eu": [0], "old-orders": [0], "x": [0]})
    for pattern, topics in (("orders", {"orders", "orders-eu", "old-orders"}),
                            ("^orders$", {"orders"}), ("^orders", {"orders", "orders-eu"})):
        r = KafkaOffsetReader(parse_source_options(
            {"kafka.bootstrap.servers": "h:1", "subscribePattern": pattern}, streaming=True),
            admin_factory=lambda conf: admin)
        assert {t for t, _ in r.topic_partitions()} == topics, pattern
    missing = reader(admin, subscribe="nope").topic_partitions()
    assert missing == []  # subscribe waits for a topic that does not exist yet


def test_a_subscribed_topic_that_is_not_there_is_named_once_then_when_it_appears(caplog):
    admin = ScriptedAdmin({"t": [0]})
    r = reader(admin, subscribe="t,nope")
    caplog.set_level(logging.INFO, logger="txkafka.reader")
    for _ in range(3):
        assert r.topic_partitions() == [("t", 0)]
    warned = [m.getMessage() for m in caplog.records if m.levelno == logging.WARNING]
    assert len(warned) == 1 and "'nope'" in warned[0] and "'t'" not in warned[0]
    admin.topics["nope"] = [0]
    assert r.topic_partitions() == [("nope", 0), ("t", 0)]
    assert "'nope' now exist" in caplog.records[-1].getMessage()


@pytest.mark.parametrize("assign, needle", [
    ('{"ghost": [0]}', "names topic 'ghost', which does not exist"),
    ('{"t": [7]}', "names partition 7 of topic 't', which has partitions 0..1"),
])
def test_assign_of_unknown_topic_or_partition_fails_at_start(assign, needle):
    admin = ScriptedAdmin(TWO)
    options = parse_source_options({"kafka.bootstrap.servers": "h:1", "assign": assign},
                                   streaming=True)
    with pytest.raises(KafkaConfigError, match=needle):
        KafkaOffsetReader(options, admin_factory=lambda conf: admin).check_assignment()


def test_failed_partitions_are_retried():
    admin = ScriptedAdmin(TWO, latest={("t", 0): 5, ("t", 1): 9},
                          errors=[{("t", 1): KafkaError.LEADER_NOT_AVAILABLE}])
    assert reader(admin).latest_offsets([("t", 0), ("t", 1)]) == {("t", 0): 5, ("t", 1): 9}
    assert admin.calls == 2


def test_retries_are_bounded_and_the_error_says_what_to_tune():
    admin = ScriptedAdmin(TWO, latest={("t", 0): 5},
                          errors=[{("t", 0): KafkaError.INVALID_REQUEST}] * 10)
    with pytest.raises(OffsetsUnavailableError, match="after 4 attempt.*fetchOffset.numRetries=4"):
        reader(admin, **{"fetchOffset.numRetries": "4"}).latest_offsets([("t", 0)])
    assert admin.calls == 4


def test_a_leader_election_is_waited_out_beyond_num_retries():
    """Found by the chaos soak: a broker of three SIGKILLed, ListOffsets answered
    LEADER_NOT_AVAILABLE / NOT_LEADER_OR_FOLLOWER for seconds; three attempts 10 ms apart gave up
    and failed the query. Leader errors are retried until the request timeout."""
    admin = ScriptedAdmin(TWO, latest={("t", 0): 5},
                          errors=[{("t", 0): KafkaError.LEADER_NOT_AVAILABLE}] * 3
                          + [{("t", 0): KafkaError.NOT_LEADER_FOR_PARTITION}] * 2)
    assert reader(admin).latest_offsets([("t", 0)]) == {("t", 0): 5}
    assert admin.calls == 6
    # ... but not forever: bounded by the request timeout (socket.timeout.ms, at least 1 s).
    admin = ScriptedAdmin(TWO, latest={("t", 0): 5},
                          errors=[{("t", 0): KafkaError.LEADER_NOT_AVAILABLE}] * 100)
    with pytest.raises(OffsetsUnavailableError, match="t-0"):
        reader(admin, **{"kafka.socket.timeout.ms": "1000"}).latest_offsets([("t", 0)])
    assert admin.calls < 10


def test_partition_unknown_after_every_attempt_is_left_out():
    admin = ScriptedAdmin(TWO, latest={("t", 0): 5},
                          errors=[{("t", 1): KafkaError.UNKNOWN_TOPIC_OR_PART}] * 3)
    assert reader(admin).latest_offsets([("t", 0), ("t", 1)]) == {("t", 0): 5}


def test_a_listed_partition_without_a_log_start_answer_keeps_its_planned_start():
    """ListOffsets answering UNKNOWN_TOPIC_OR_PARTITION for a partition metadata still lists (a
    broker out of step) must not read as "deleted": that would cut its range to nothing and skip
    its records (failOnDataLoss=false) or fail the query for nothing. Gone is gone, though."""
    admin = ScriptedAdmin(TWO, earliest={("t", 0): 0, ("t", 1): 0},
                          errors=[{("t", 1): KafkaError.UNKNOWN_TOPIC_OR_PART}] * 3)
    r = reader(admin)
    assert r.log_starts([("t", 0), ("t", 1)], {("t", 0): 10, ("t", 1): 10}) == {
        ("t", 0): 0, ("t", 1): 10}
    admin = ScriptedAdmin({"t": [0]}, earliest={("t", 0): 0},
                          errors=[{("t", 1): KafkaError.UNKNOWN_TOPIC_OR_PART}] * 3)
    assert reader(admin).log_starts([("t", 0), ("t", 1)], {("t", 1): 10}) == {("t", 0): 0}


class _FlakyMetadata(ScriptedAdmin):
    """Metadata answers from a script (then the last one for good)."""

    def __init__(self, answers):
        super().__init__(answers[-1])
        self.answers = list(answers)

    def list_topics(self, timeout=None):
        return _Metadata(self.answers.pop(0) if len(self.answers) > 1 else self.answers[0])


def test_a_partition_one_metadata_answer_lacks_is_gone_only_once_fresh_answers_agree():
    known = [("t", 0), ("t", 1)]
    whole, without_t = {"t": [0, 1], "other": [0]}, {"other": [0]}
    # Lacked once: asked again until two answers in a row agree; it is there.
    assert reader(_FlakyMetadata([without_t, whole])).confirmed_partitions(known) == known
    # Lacked by a fresh answer too: gone.
    assert reader(_FlakyMetadata([without_t, without_t])).confirmed_partitions(known) == []
    # Answers that keep disagreeing: no offsets are chosen from them; a typed, retriable error.
    flapping = _FlakyMetadata([without_t, whole] * 4)
    with pytest.raises(OffsetsUnavailableError, match=r"metadata answers disagree on whether t-0, "
                       r"t-1 still exist.*Restart the query once the cluster has settled"):
        reader(flapping, **{"fetchOffset.numRetries": "3"}).confirmed_partitions(known)


def test_specific_starting_offsets_must_name_every_partition():
    admin = ScriptedAdmin(TWO, earliest={("t", 0): 0, ("t", 1): 2}, latest={("t", 0): 8, ("t", 1): 9},
                          high={("t", 0): 8, ("t", 1): 9})
    r = reader(admin, startingOffsets='{"t": {"0": 3, "1": -2}}')
    assert r.resolve(r.options.starting, [("t", 0), ("t", 1)], starting=True) == {
        ("t", 0): 3, ("t", 1): 2}
    r = reader(admin, startingOffsets='{"t": {"0": -1}}')
    with pytest.raises(KafkaConfigError, match="must name every partition.*missing t-1"):
        r.resolve(r.options.starting, [("t", 0), ("t", 1)], starting=True)
    r = reader(admin, startingOffsets='{"t": {"0": 1, "1": 1, "5": 1}}')
    with pytest.raises(KafkaConfigError, match="not part of the query.*t-5"):
        r.resolve(r.options.starting, [("t", 0), ("t", 1)], starting=True)


def test_specific_start_past_the_log_end_is_an_error():
    admin = ScriptedAdmin(TWO, high={("t", 0): 8})
    r = reader(admin, subscribe="t", startingOffsets='{"t": {"0": 50}}')
    with pytest.raises(KafkaConfigError, match="starts at 50, past its end offset 8"):
        r.resolve(r.options.starting, [("t", 0)], starting=True)


def test_timestamps_with_no_matching_record():
    admin = ScriptedAdmin(TWO, latest={("t", 0): 8, ("t", 1): 9}, high={("t", 1): 9},
                          by_ts={("t", 0): 4})
    tps = [("t", 0), ("t", 1)]
    r = reader(admin, startingTimestamp="1000")
    with pytest.raises(KafkaConfigError, match=r"no record in topic 't' partition 1 has a "
                       r"timestamp >= 1000 \(all records are older\).*"
                       r"startingOffsetsByTimestampStrategy"):
        r.resolve(r.options.starting, tps, starting=True)
    r = reader(admin, startingTimestamp="1000", startingOffsetsByTimestampStrategy="latest")
    assert r.resolve(r.options.starting, tps, starting=True) == {("t", 0): 4, ("t", 1): 9}
    # The brokers look below the last stable offset only: a newer record may be in an open
    # transaction (test_reader_kafka.py shows the broker's answer), not "all records older".
    admin.answers["high"] = {("t", 1): 11}
    r = reader(admin, startingTimestamp="1000")
    with pytest.raises(KafkaConfigError, match=r"partition 1 has a timestamp >= 1000 \(none before "
                       r"its last stable offset 9: offsets 9 to 11 wait on a transaction that is "
                       r"still open"):
        r.resolve(r.options.starting, tps, starting=True)
    b = KafkaOffsetReader(parse_source_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "t",
         "endingOffsetsByTimestamp": '{"t": {"0": 5, "1": 5}}'}, streaming=False),
        admin_factory=lambda conf: admin)
    # An ending timestamp without a match means "latest" (Spark's rule).
    assert b.resolve(b.options.ending, tps, starting=False) == {("t", 0): 4, ("t", 1): 9}


def test_latest_can_come_from_a_fixed_target():
    admin = ScriptedAdmin(TWO)
    r = reader(admin, startingOffsets="latest")
    assert r.resolve(r.options.starting, [("t", 0)], starting=True,
                     latest={("t", 0): 77}) == {("t", 0): 77}
    assert admin.calls == 0


def test_unreachable_cluster_fails_within_the_retry_budget():
    # A real librdkafka AdminClient against a port nobody listens on.
    options = parse_source_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                                    "kafka.socket.timeout.ms": "1000",
                                    "fetchOffset.numRetries": "2",
                                    "fetchOffset.retryIntervalMs": "10"}, streaming=True)
    with pytest.raises(OffsetsUnavailableError, match="after 2 attempt.*127.0.0.1:1"):
        KafkaOffsetReader(options).topic_partitions()


class _StaleRouteAdmin:
    """One AdminClient's view of the cluster: made before a leader election, it keeps sending
    partition 0's ListOffsets to the dead leader and answers OFFSET_INVALID (-1001), no error."""

    def __init__(self, stale: bool) -> None:
        self.stale = stale

    def list_topics(self, timeout=None):
        return _Metadata({"t": [0, 1]})

    def list_offsets(self, specs, isolation_level=None, request_timeout=None):
        out = {}
        for tp in specs:
            fut: Future = Future()
            fut.set_result(_Result(-1001 if self.stale and tp.partition == 0 else 42))
            out[tp] = fut
        return out


def test_a_leaderless_answer_is_asked_again_with_fresh_metadata():
    """Found by the CI chaos run: after a broker of three died, the reader's long-lived
    AdminClient answered -1001 for a partition for over a minute although a new leader had been
    elected (librdkafka routes ListOffsets by its cached metadata); the query failed. The retry
    after a leaderless answer now goes through a new client."""
    made: list[_StaleRouteAdmin] = []

    def factory(conf):
        made.append(_StaleRouteAdmin(stale=not made))  # only the first client predates the election
        return made[-1]

    options = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                    "fetchOffset.retryIntervalMs": "0"}, streaming=True)
    r = KafkaOffsetReader(options, admin_factory=factory)
    assert r.latest_offsets([("t", 0), ("t", 1)]) == {("t", 0): 42, ("t", 1): 42}
    assert len(made) == 2
    assert r.latest_offsets([("t", 0)]) == {("t", 0): 42}  # the fresh client is kept
    assert len(made) == 2


# ---- a leaderless partition during a timestamp look-up ---------------------------------------

def _elected_after_first_client(made, by_ts):
    """Factory: the first client predates a leader election and answers -1001 (OFFSET_INVALID,
    no error) for partition 0's timestamp look-up; every later client sees the new leader."""
    def factory(conf):
        stale = not made
        made.append(ScriptedAdmin(TWO, latest={("t", 0): 9, ("t", 1): 9},
                                  high={("t", 0): 9, ("t", 1): 9},
                                  by_ts={**by_ts, ("t", 0): -1001} if stale else by_ts))
        return made[-1]
    return factory


@pytest.mark.parametrize("opts, starting", [
    ({"endingTimestamp": "1000"}, False),  # was: read up to latest (9)
    ({"startingTimestamp": "1000"}, True),  # was: "all records are older" (strategy=error)
    ({"startingTimestamp": "1000", "startingOffsetsByTimestampStrategy": "latest"}, True),
])
def test_a_leaderless_answer_to_a_timestamp_look_up_is_not_no_match(opts, starting):
    """Audit: -1001 during a leader election was taken for "no record that new"; only -1 is."""
    made: list = []
    options = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                    "fetchOffset.retryIntervalMs": "0", **opts},
                                   streaming=starting)
    r = KafkaOffsetReader(options, admin_factory=_elected_after_first_client(
        made, {("t", 0): 4, ("t", 1): 6}))
    spec = options.starting if starting else options.ending
    assert r.resolve(spec, [("t", 0), ("t", 1)], starting=starting) == {("t", 0): 4, ("t", 1): 6}
    assert len(made) == 2  # asked again with a fresh client


def test_a_timestamp_look_up_on_a_partition_leaderless_for_good_fails_typed():
    admin = ScriptedAdmin(TWO, latest={("t", 0): 9}, by_ts={("t", 0): -1001})
    r = reader(admin, startingTimestamp="1000",
               **{"kafka.socket.timeout.ms": "1000", "fetchOffset.numRetries": "2"})
    with pytest.raises(OffsetsUnavailableError, match=r"offsets for timestamps.*t-0.*\(-1001\)"):
        r.resolve(r.options.starting, [("t", 0)], starting=True)


# ---- explicit endingOffsets past the end ------------------------------------------------------

def batch_reader(admin, **opts):
    options = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                    "fetchOffset.retryIntervalMs": "0", **opts}, streaming=False)
    return KafkaOffsetReader(options, admin_factory=lambda conf: admin)


def _end(r):
    return r.resolve(r.options.ending, [("t", 0), ("t", 1)], starting=False)


def test_explicit_ending_offset_past_the_end_fails_at_start():
    """Audit: endingOffsets past the log end made every task wait kafkaConsumer.pollTimeoutMs and
    then report data loss ("offsets went backwards")."""
    admin = ScriptedAdmin(TWO, latest={("t", 0): 500, ("t", 1): 7},
                          high={("t", 0): 500, ("t", 1): 7})
    for fail_on_loss in ("true", "false"):  # a setting error, not data loss
        r = batch_reader(admin, endingOffsets='{"t": {"0": 1000, "1": -1}}',
                         failOnDataLoss=fail_on_loss)
        with pytest.raises(KafkaConfigError) as e:
            _end(r)
        msg = str(e.value)
        assert "option 'endingOffsets': topic 't' partition 0 ends at 1000, past the partition's " \
               "current end offset 500" in msg
        assert "use -1 (latest) for that partition, or an offset <= 500" in msg
        assert "transaction" not in msg
    # At or before the end, and -1, are fine.
    r = batch_reader(admin, endingOffsets='{"t": {"0": 500, "1": -1}}')
    assert _end(r) == {("t", 0): 500, ("t", 1): 7}
    r = batch_reader(admin, endingOffsets='{"t": {"0": 20, "1": 7}}')
    assert _end(r) == {("t", 0): 20, ("t", 1): 7}


def test_explicit_ending_offset_is_checked_against_what_the_isolation_level_reaches():
    # LSO 480 (a transaction open from there), high watermark 500.
    admin = ScriptedAdmin(TWO, latest={("t", 0): 480, ("t", 1): 7},
                          high={("t", 0): 500, ("t", 1): 7})
    r = batch_reader(admin, endingOffsets='{"t": {"0": 490, "1": 7}}')
    with pytest.raises(KafkaConfigError, match=r"ends at 490, past the partition's current end "
                       r"offset 480 \(its last stable offset.*offsets 480 to 500 wait on a "
                       r"transaction that is still open.*or an offset <= 480"):
        _end(r)
    r = batch_reader(admin, endingOffsets='{"t": {"0": 490, "1": 8}}',
                     **{"kafka.isolation.level": "read_uncommitted"})
    with pytest.raises(KafkaConfigError, match=r"partition 1 ends at 8, past the partition's "
                       r"current end offset 7\. A batch"):
        _end(r)
    r = batch_reader(admin, endingOffsets='{"t": {"0": 490, "1": 7}}',
                     **{"kafka.isolation.level": "read_uncommitted"})
    assert _end(r) == {("t", 0): 490, ("t", 1): 7}


def test_the_driver_s_admin_client_connects_quickly_unless_the_user_says_otherwise():
    """librdkafka pauses half of reconnect.backoff.ms before its first connection to an advertised
    broker (client.config.RECONNECT_BACKOFF_MS): the query start's first look-up waits for it."""
    seen: list[dict] = []

    def factory(conf):
        seen.append(dict(conf))
        return ScriptedAdmin(TWO)

    for opts, expected in (({}, 20), ({"kafka.reconnect.backoff.ms": "250"}, "250")):
        options = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **opts},
                                       streaming=True)
        KafkaOffsetReader(options, admin_factory=factory).topic_partitions()
        assert seen[-1]["reconnect.backoff.ms"] == expected
