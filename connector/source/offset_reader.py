"""Driver side: which partitions exist, and their earliest, latest and by-timestamp offsets.

Why: every trigger the reader must find new partitions and topics, bound its batch by the latest
offset, and detect data loss. Under ``read_committed`` "latest" must be the last stable offset (LSO):
reading up to the high watermark would plan ranges into open transactions, whose records the
consumer holds back, so the range could never finish. Verified against Apache Kafka 4.3 with an open
transaction: ``AdminClient.list_offsets(latest, isolation_level=READ_COMMITTED)`` returns the LSO
(READ_UNCOMMITTED the high watermark); a read_committed ``Consumer.get_watermark_offsets`` query also
returns the LSO as "high", its cached variant the high watermark.

Every broker call has a timeout and a bounded number of attempts (``fetchOffset.numRetries``,
``fetchOffset.retryIntervalMs``): the driver never hangs on an unreachable cluster.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Callable, Iterable, Mapping, Optional, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec

from ..client.librdkafka_errors import (
    RedactingLog,
    SecurityErrorProbe,
    missing_topic_operations,
    topic_access_error,
    wait_checking_security,
)
from ..errors import (KafkaAuthorizationError, KafkaConfigError, OffsetsUnavailableError,
                      TxKafkaError)
from ..client.config import RECONNECT_BACKOFF_MS
from .offsets import PartitionOffsets, describe_offsets
from ..secrets_redaction import redact_text
from .options import (
    EARLIEST,
    LATEST,
    Assign,
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    OffsetSpec,
    PartitionTimestamps,
    SourceOptions,
    SpecificOffsets,
    Subscribe,
    SubscribePattern,
    TopicPartitionKey,
)

log = logging.getLogger("txkafka.reader")
_LIBRDKAFKA_LOG = logging.getLogger("txkafka.librdkafka")


# Per-partition answers meaning "this partition does not exist (any more)".
_GONE = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
         KafkaError._UNKNOWN_TOPIC}
# Per-partition answers meaning "ask again shortly": the leader is moving or was just lost.
_MOVING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
           KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
           KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.OFFSET_NOT_AVAILABLE,
           KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH}

T = TypeVar("T")

# One ListOffsets attempt's budget. The call is cheap; what takes long is a request queued for a
# dead leader, which only the request timeout ends (60 s by default). A short attempt followed by
# a retry on fresh metadata finds the new leader within seconds; the look-up as a whole stays
# bounded by fetchOffset.numRetries and the request timeout.
_LIST_OFFSETS_ATTEMPT_S = 5.0

# ListOffsets by timestamp: Kafka's answer (passed through by librdkafka) when no record of the
# partition has a timestamp that new. Any other negative offset means no usable answer (-1001,
# OFFSET_INVALID, while the partition has no leader) and is asked again, never read as "no match".
_NO_RECORD_AT_TIMESTAMP = -1

# A group id the reader made: "<groupIdPrefix>-<uuid4>".
_GENERATED_GROUP = re.compile(
    r"^(.+-)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class KafkaOffsetReader:
    """Partition discovery and offset look-ups for one query, through one lazily created AdminClient.

    Holds a live client, so it stays on the driver: readers drop it when pickled.
    """

    def __init__(self, options: SourceOptions,
                 admin_factory: Callable[[dict], AdminClient] | None = None) -> None:
        self.options = options
        self._admin_factory = admin_factory or (lambda conf: AdminClient(conf))
        self._admin_client: AdminClient | None = None
        conf = options.client_conf
        # One attempt's budget; the whole look-up is bounded by attempts x (this + interval).
        self.request_timeout_s = min(max(float(conf.get("socket.timeout.ms", 60000)) / 1000.0,
                                         1.0), 60.0)
        self.isolation = (IsolationLevel.READ_UNCOMMITTED
                          if options.isolation_level == "read_uncommitted"
                          else IsolationLevel.READ_COMMITTED)
        # A refused TLS/SASL login reaches only error_cb; this keeps it for the error we raise.
        self._probe = SecurityErrorProbe(conf)
        self._absent: frozenset[str] = frozenset()  # subscribed topics not there, as last logged

    # ---- plumbing ------------------------------------------------------------------------------

    def _admin(self) -> AdminClient:
        if self._admin_client is None:
            conf: dict = self.options.client_conf
            conf.pop("isolation.level", None)  # a consumer setting; ListOffsets takes it per call
            conf.setdefault("reconnect.backoff.ms", RECONNECT_BACKOFF_MS)  # a faster first look-up
            conf["logger"] = RedactingLog(_LIBRDKAFKA_LOG, conf)
            conf["error_cb"] = self._probe.on_error
            try:
                self._admin_client = self._admin_factory(conf)
            except KafkaException as e:
                raise KafkaConfigError(
                    "librdkafka rejected the client settings from the kafka.* options: "
                    f"{self._redact(e)}") from None
        return self._admin_client

    def close(self) -> None:
        """Drop the client (AdminClient has no close(); the reference is what holds it)."""
        self._admin_client = None

    def _redact(self, err: BaseException | str) -> str:
        return redact_text(str(err), self.options.client_conf)

    def _with_retries(self, what: str, attempt: Callable[[], T]) -> T:
        attempts = max(1, self.options.fetch_offset_num_retries)
        interval = self.options.fetch_offset_retry_interval_ms / 1000.0
        last: BaseException | None = None
        for i in range(attempts):
            try:
                return attempt()
            except (KafkaConfigError, OffsetsUnavailableError):
                raise
            except (KafkaException, TimeoutError, RuntimeError, ValueError) as e:
                last = e
                log.warning("fetching %s failed (attempt %d of %d): %s", what, i + 1, attempts,
                            self._redact(e))
                if i + 1 < attempts:
                    time.sleep(interval)
        raise OffsetsUnavailableError(
            f"could not fetch {what} from Kafka after {attempts} attempt(s) "
            f"(fetchOffset.numRetries={self.options.fetch_offset_num_retries}, "
            f"fetchOffset.retryIntervalMs={self.options.fetch_offset_retry_interval_ms}, "
            f"bootstrap.servers={self.options.client_conf.get('bootstrap.servers')}): "
            f"{self._redact(last) if last else 'no answer'}")

    # ---- partitions ----------------------------------------------------------------------------

    def _metadata(self) -> dict[str, list[int]]:
        def attempt() -> dict[str, list[int]]:
            admin = self._admin()
            # In slices: a refused TLS/SASL login fails at once, not after the request time-out.
            md = wait_checking_security(lambda t: admin.list_topics(timeout=t),
                                        timeout_s=self.request_timeout_s, client=admin,
                                        probe=self._probe, action="fetching topic metadata")
            out: dict[str, list[int]] = {}
            for name, t in md.topics.items():
                if t.error is not None and t.error.code() in _GONE:
                    continue
                if t.error is not None and not t.partitions:
                    raise KafkaException(t.error)
                out[name] = sorted(t.partitions)
            return out

        return self._with_retries("topic metadata", attempt)

    def topic_partitions(self) -> list[TopicPartitionKey]:
        """The partitions the strategy covers right now (sorted). Missing topics are simply absent."""
        md = self._metadata()
        strategy = self.options.strategy
        if isinstance(strategy, Subscribe):
            self._log_absent(frozenset(t for t in strategy.topics if t not in md))
            return sorted((t, p) for t in strategy.topics for p in md.get(t, ()))
        if isinstance(strategy, SubscribePattern):
            return sorted((t, p) for t, parts in md.items() if strategy.matches(t) for p in parts)
        assert isinstance(strategy, Assign)
        return sorted((t, p) for t, p in strategy.partitions if p in md.get(t, ()))

    def confirmed_partitions(self, known: Iterable[TopicPartitionKey]) -> list[TopicPartitionKey]:
        """``topic_partitions()``, in which a partition of ``known`` (one the query reads) that the
        answer lacks counts as gone only once a fresh answer lacks it too.

        A broker out of step (restarting, behind the controller) can answer "unknown topic" for a
        live topic. An end offset logged without the partition would make every replay of that
        batch report it deleted, or with failOnDataLoss=false drop it and later read it again from
        offset 0 as a new partition. Answers that keep disagreeing (``fetchOffset.numRetries``
        more, ``fetchOffset.retryIntervalMs`` apart) raise OffsetsUnavailableError: no offset is
        chosen from them, and the restarted query asks again.
        """
        known = set(known)
        answer = self.topic_partitions()
        if known <= set(answer):
            return answer
        attempts = max(1, self.options.fetch_offset_num_retries) + 1
        unsettled: list[TopicPartitionKey] = []
        for i in range(attempts):
            if i:
                time.sleep(self.options.fetch_offset_retry_interval_ms / 1000.0)
            fresh = self.topic_partitions()
            unsettled = sorted(tp for tp in known if (tp in answer) != (tp in fresh))
            if not unsettled:
                return fresh
            answer = fresh
        raise OffsetsUnavailableError(
            f"the brokers' metadata answers disagree on whether "
            f"{describe_offsets({tp: 0 for tp in unsettled}).replace('@0', '')} still exist(s) "
            f"({attempts + 1} answers, fetchOffset.retryIntervalMs="
            f"{self.options.fetch_offset_retry_interval_ms} apart; a broker restarting or out of "
            "step): no offsets were chosen from them. Restart the query once the cluster has "
            "settled; it resumes from its checkpoint")

    def _log_absent(self, absent: frozenset[str]) -> None:
        """A subscribed topic that is not there is waited for (Spark's reader fails instead): say
        so when the set changes, so a misspelt name does not make a quietly empty stream."""
        if absent - self._absent:
            log.warning("subscribed topic(s) %s do not exist (or this principal may not DESCRIBE "
                        "them): nothing is read from them until they appear, then from their "
                        "earliest offset; check the 'subscribe' option if they should be there",
                        ", ".join(repr(t) for t in sorted(absent)))
        elif self._absent - absent:
            log.info("subscribed topic(s) %s now exist", ", ".join(
                repr(t) for t in sorted(self._absent - absent)))
        self._absent = absent

    def check_access(self) -> None:
        """When a query starts or restarts: may the principal read its topics and use its group?

        Without this a missing ACL shows late or not at all: a subscribed topic the principal may
        not DESCRIBE is simply absent from an all-topics metadata answer (the query reads nothing,
        silently); without READ every task's fetch is refused until kafkaConsumer.pollTimeoutMs;
        without DESCRIBE on the group every consumer reports GROUP_AUTHORIZATION_FAILED and its
        close() blocks for kafka.session.timeout.ms. Only a definite "not authorized" answer fails;
        anything else (old broker, coordinator still loading) leaves the check to the reads.
        """
        self._metadata()  # reachable, and logged in (a refused login fails here, typed)
        strategy = self.options.strategy
        if isinstance(strategy, Subscribe):
            named = sorted(set(strategy.topics))
        elif isinstance(strategy, Assign):
            named = sorted({t for t, _ in strategy.partitions})
        else:
            named = []  # subscribePattern matches only topics the principal may DESCRIBE
        action = "checking the reader's permissions at start"
        admin = self._admin()
        try:
            lacking = missing_topic_operations(admin, named, ("READ",),
                                               timeout_s=self.request_timeout_s,
                                               probe=self._probe, action=action)
        except (KafkaException, TimeoutError) as e:
            log.warning("could not check the reader's permissions on %s (%s); going on", named,
                        self._redact(e))
            lacking = {}
        for topic in named:
            if topic in lacking:
                raise topic_access_error(action, topic, lacking[topic], "reader")
        self._check_group(admin, action)

    def _check_group(self, admin: AdminClient, action: str) -> None:
        group = self.options.group_id
        try:
            fut = admin.describe_consumer_groups([group], request_timeout=self.request_timeout_s)
            wait_checking_security(lambda t: fut[group].result(timeout=t),
                                   timeout_s=self.request_timeout_s + 5, client=admin,
                                   probe=self._probe, action=action)
            return
        except KafkaException as e:
            kerr = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if kerr is None or kerr.code() != KafkaError.GROUP_AUTHORIZATION_FAILED:
                # e.g. NOT_COORDINATOR while __consumer_offsets is created: the check is advisory.
                log.info("could not check the reader's permissions on consumer group %r (%s); "
                            "going on", group, self._redact(e))
                return
        except TimeoutError as e:
            log.info("could not check the reader's permissions on consumer group %r (%s); "
                        "going on", group, self._redact(e) or "time-out")
            return
        generated = _GENERATED_GROUP.match(group)
        if generated:
            name, grant = generated.group(1), (f"--group {generated.group(1)} "
                                               "--resource-pattern-type prefixed")
            where = (f"The group id is the option groupIdPrefix plus a random UUID, so grant it on "
                     f"the prefix {name!r}")
        else:
            grant, where = f"--group {group}", "The group id is kafka.group.id"
        raise KafkaAuthorizationError(
            f"{action}: the reader principal is not authorized on consumer group {group!r} "
            "(GROUP_AUTHORIZATION_FAILED). txkafka assigns partitions and never joins the group, "
            "but librdkafka's consumers look up the group's coordinator, which needs DESCRIBE on "
            "the group (READ with commitOffsetsToGroup); without it every consumer reports this "
            f"error and its close() blocks for kafka.session.timeout.ms. {where}: kafka-acls.sh "
            f"--bootstrap-server ... --add --allow-principal User:<principal> --operation READ "
            f"{grant}")

    def check_assignment(self) -> None:
        """At query start: every topic partition named in ``assign`` must exist."""
        strategy = self.options.strategy
        if not isinstance(strategy, Assign):
            return
        md = self._metadata()
        for topic, p in strategy.partitions:
            if topic not in md:
                raise KafkaConfigError(
                    f"option 'assign' names topic {topic!r}, which does not exist on "
                    f"{self.options.client_conf.get('bootstrap.servers')} (create it first, or "
                    "use 'subscribe' to wait for it)")
            if p not in md[topic]:
                raise KafkaConfigError(
                    f"option 'assign' names partition {p} of topic {topic!r}, which has "
                    f"partitions {md[topic][0]}..{md[topic][-1]}")

    # ---- offsets -------------------------------------------------------------------------------

    def _list_offsets(self, what: str, specs: Mapping[TopicPartitionKey, KafkaOffsetSpec],
                      isolation: IsolationLevel, by_time: bool = False) -> dict[TopicPartitionKey, int]:
        """ListOffsets, retrying the partitions that failed.

        Partitions the broker still calls unknown after every attempt are left out of the result
        (deleted meanwhile); callers decide with fresh metadata whether that means data loss.
        With ``by_time`` an offset of -1 is kept: it is Kafka's "no record that new" answer.
        While a partition has no leader (a broker died), librdkafka answers OFFSET_INVALID
        (-1001) without an error, or a retriable error (NOT_LEADER_OR_FOLLOWER,
        LEADER_NOT_AVAILABLE, a timeout): never an offset (it would go into Spark's offset log);
        such partitions are asked again until the request timeout, as a leader election takes
        seconds. librdkafka's admin client routes ListOffsets by its cached metadata and keeps
        asking the dead leader long after the election (observed for over 60 s against Kafka
        4.3), so every new attempt after a leaderless answer uses a fresh client. A partition
        offline for longer (its only in-sync replica died) fails the batch with
        OffsetsUnavailableError naming it; the restart resumes from the checkpoint.
        """
        results: dict[TopicPartitionKey, int] = {}
        pending = dict(specs)
        gone: set[TopicPartitionKey] = set()
        leaderless: set[TopicPartitionKey] = set()
        attempt_s = min(self.request_timeout_s, _LIST_OFFSETS_ATTEMPT_S)

        def attempt() -> None:
            if leaderless:
                self.close()  # the last answer came from stale metadata: ask with fresh metadata
            futures = self._admin().list_offsets(
                {TopicPartition(t, p): spec for (t, p), spec in pending.items()},
                isolation_level=isolation, request_timeout=attempt_s)
            errors: list[str] = []
            gone.clear()
            leaderless.clear()
            for tp, fut in futures.items():
                key = (tp.topic, tp.partition)
                try:
                    offset = fut.result(timeout=attempt_s + 5).offset
                    if offset < 0 and not (by_time and offset == _NO_RECORD_AT_TIMESTAMP):
                        leaderless.add(key)
                        errors.append(f"{tp.topic}-{tp.partition}: no offset in the answer "
                                      f"({offset}): the partition has no leader right now")
                        continue
                    results[key] = offset
                    pending.pop(key, None)
                except KafkaException as e:
                    kerr = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                    if kerr is not None and kerr.code() in _GONE:
                        gone.add(key)
                    elif kerr is not None and (kerr.retriable() or kerr.code() in _MOVING):
                        leaderless.add(key)  # a leader election or a broker restart: wait
                    errors.append(f"{tp.topic}-{tp.partition}: {self._redact(e)}")
            if pending:
                raise KafkaException(KafkaError(KafkaError._FAIL, "; ".join(errors[:5])))

        attempts = max(1, self.options.fetch_offset_num_retries)
        interval = self.options.fetch_offset_retry_interval_ms / 1000.0
        last: BaseException | None = None
        for i in range(attempts):
            try:
                attempt()
                return results
            except (KafkaException, TimeoutError, RuntimeError, ValueError) as e:
                last = e
                if i + 1 < attempts:
                    time.sleep(interval)
        deadline = time.monotonic() + self.request_timeout_s
        while pending and set(pending) <= leaderless and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                attempt()
                return results
            except (KafkaException, TimeoutError, RuntimeError, ValueError) as e:
                last = e
        if pending and set(pending) <= gone:
            log.warning("partitions %s are unknown to the cluster while fetching %s",
                        describe_offsets({tp: 0 for tp in pending}).replace("@0", ""), what)
            return results
        raise OffsetsUnavailableError(
            f"could not fetch {what} for {len(pending)} partition(s) after {attempts} attempt(s) "
            f"(fetchOffset.numRetries={self.options.fetch_offset_num_retries}, "
            f"fetchOffset.retryIntervalMs={self.options.fetch_offset_retry_interval_ms}, "
            f"bootstrap.servers={self.options.client_conf.get('bootstrap.servers')}): "
            f"{self._redact(last) if last else 'no answer'}")

    def earliest_offsets(self, tps: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        """Log start offsets (what retention and delete-records left)."""
        specs = {tp: KafkaOffsetSpec.earliest() for tp in tps}
        if not specs:
            return {}
        return self._list_offsets("earliest offsets", specs, self.isolation)

    def log_starts(self, tps: Iterable[TopicPartitionKey],
                   planned: Mapping[TopicPartitionKey, int]) -> PartitionOffsets:
        """Log start offsets to plan a batch's ranges with. A partition ListOffsets gave no answer
        for (UNKNOWN_TOPIC_OR_PARTITION from a broker out of step) that metadata still lists is
        not taken for deleted, which would skip its records or fail the query for nothing: it
        keeps its planned start, and the task reading it applies the data-loss rules (nor is one
        metadata answer lacking it: ``confirmed_partitions``)."""
        tps = list(tps)
        earliest = dict(self.earliest_offsets(tps))
        absent = [tp for tp in tps if tp not in earliest]
        if absent:
            listed = set(self.confirmed_partitions(absent))
            for tp in absent:
                if tp in listed:
                    log.warning("the earliest offset of %s[%d] could not be read, though the "
                                "partition exists: its range is read from %d as planned",
                                tp[0], tp[1], planned.get(tp, 0))
                    earliest[tp] = planned.get(tp, 0)
        return earliest

    def latest_offsets(self, tps: Iterable[TopicPartitionKey], *,
                       isolation: IsolationLevel | None = None) -> PartitionOffsets:
        """Next offset to read up to: the LSO under read_committed, else the high watermark."""
        specs = {tp: KafkaOffsetSpec.latest() for tp in tps}
        if not specs:
            return {}
        return self._list_offsets("latest offsets", specs, isolation or self.isolation)

    def high_watermarks(self, tps: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        """The log end (past open transactions): tells "waiting for the LSO" from "went backwards"."""
        return self.latest_offsets(tps, isolation=IsolationLevel.READ_UNCOMMITTED)

    def offsets_for_timestamps(self, timestamps: Mapping[TopicPartitionKey, int]
                               ) -> dict[TopicPartitionKey, Optional[int]]:
        """First offset whose timestamp is >= the given one; None where no record is that new."""
        specs = {tp: KafkaOffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()}
        if not specs:
            return {}
        found = self._list_offsets("offsets for timestamps", specs, self.isolation, by_time=True)
        return {tp: (None if off == _NO_RECORD_AT_TIMESTAMP else off) for tp, off in found.items()}

    # ---- resolving starting/ending specs -------------------------------------------------------

    def resolve(self, spec: OffsetSpec, tps: list[TopicPartitionKey], *, starting: bool,
                latest: Mapping[TopicPartitionKey, int] | None = None) -> PartitionOffsets:
        """Turn startingOffsets/endingOffsets (or their timestamp forms) into concrete offsets.

        ``latest`` (optional) supplies already-fetched latest offsets, e.g. Trigger.AvailableNow's
        target, so a start never lies past the end the query will stop at.
        """
        option = "startingOffsets" if starting else "endingOffsets"

        def latest_of(keys: Iterable[TopicPartitionKey]) -> PartitionOffsets:
            keys = list(keys)
            if latest is not None and all(k in latest for k in keys):
                return {k: latest[k] for k in keys}
            return self.latest_offsets(keys)

        if isinstance(spec, EarliestOffsets):
            return self.earliest_offsets(tps)
        if isinstance(spec, LatestOffsets):
            return latest_of(tps)
        if isinstance(spec, SpecificOffsets):
            wanted = spec.as_dict()
            _check_same_partitions(option, wanted, tps)
            explicit = {tp for tp, off in wanted.items() if off >= 0}
            out = {tp: wanted[tp] for tp in explicit}
            out.update(self.earliest_offsets([tp for tp, off in wanted.items() if off == EARLIEST]))
            # An explicit end is checked against the same latest offsets: one look-up for both.
            need_latest = [tp for tp, off in wanted.items()
                           if off == LATEST or (not starting and off >= 0)]
            now = latest_of(need_latest)
            out.update({tp: now[tp] for tp, off in wanted.items() if off == LATEST and tp in now})
            if starting:
                self.check_specific_starting(out, explicit)
            else:
                self._check_specific_ending(out, explicit, now)
            return out
        if isinstance(spec, (GlobalTimestamp, PartitionTimestamps)):
            if isinstance(spec, GlobalTimestamp):
                ts_map = {tp: spec.timestamp_ms for tp in tps}
                ts_option = "startingTimestamp" if starting else "endingTimestamp"
            else:
                ts_map = spec.as_dict()
                ts_option = ("startingOffsetsByTimestamp" if starting
                             else "endingOffsetsByTimestamp")
                _check_same_partitions(ts_option, ts_map, tps)
            found = self.offsets_for_timestamps(ts_map)
            missing = [tp for tp in ts_map if found.get(tp) is None]
            if missing and starting and self.options.on_no_matching_starting_timestamp == "error":
                t, p = missing[0]
                raise KafkaConfigError(
                    f"option '{ts_option}': no record in topic {t!r} partition {p} has a timestamp "
                    f">= {ts_map[(t, p)]} ({self._why_none_that_new((t, p))}); set "
                    "startingOffsetsByTimestampStrategy=latest to start at the latest offset there")
            out = {tp: off for tp, off in found.items() if off is not None}
            out.update(latest_of(missing))
            return out
        raise AssertionError(spec)

    def _why_none_that_new(self, tp: TopicPartitionKey) -> str:
        """Why a timestamp look-up found no record: under read_committed the brokers look only
        below the last stable offset, so a newer record may wait in an open transaction."""
        if self.isolation == IsolationLevel.READ_COMMITTED:
            try:
                stable = self.latest_offsets([tp]).get(tp)
                high = self.high_watermarks([tp]).get(tp)
            except TxKafkaError:  # only the error's wording depends on it
                return "all records are older, or in a transaction still open"
            if stable is not None and high is not None and high > stable:
                return (f"none before its last stable offset {stable}: offsets {stable} to {high} "
                        "wait on a transaction that is still open, and read_committed looks no "
                        "further")
        return "all records are older"

    def check_specific_starting(self, offsets: PartitionOffsets, explicit: set[TopicPartitionKey],
                                option: str = "startingOffsets", hint: str = "") -> None:
        """An explicit starting offset past the log end is a mistake: say so at start."""
        if not explicit:
            return
        ends = self.high_watermarks(sorted(explicit))
        for tp in sorted(explicit):
            if tp in ends and offsets[tp] > ends[tp]:
                raise KafkaConfigError(
                    f"option '{option}': topic {tp[0]!r} partition {tp[1]} starts at "
                    f"{offsets[tp]}, past its end offset {ends[tp]}{hint}")

    def _check_specific_ending(self, offsets: PartitionOffsets, explicit: set[TopicPartitionKey],
                               latest: PartitionOffsets) -> None:
        """An explicit ending offset past what the reader can reach is a mistake: say so at start.

        Otherwise every task waits kafkaConsumer.pollTimeoutMs for records that do not exist and
        then reports data loss ("offsets went backwards"). The reachable end is ``latest``: the
        LSO under read_committed, the high watermark otherwise. This is a setting error, not data
        loss, so failOnDataLoss=false does not soften it.
        """
        past = [tp for tp in sorted(explicit) if tp in latest and offsets[tp] > latest[tp]]
        if not past:
            return
        t, p = tp = past[0]
        end, reach = offsets[tp], latest[tp]
        where, hint = "", ""
        if self.isolation == IsolationLevel.READ_COMMITTED:
            where = " (its last stable offset: read_committed reads no further)"
            high = self.high_watermarks([tp]).get(tp, reach)
            if reach < high and end <= high:
                hint = (f"offsets {reach} to {high} wait on a transaction that is still open: "
                        "retry once it has finished, or ")
        others = f"; {len(past) - 1} more partition(s) likewise" if len(past) > 1 else ""
        raise KafkaConfigError(
            f"option 'endingOffsets': topic {t!r} partition {p} ends at {end}, past the "
            f"partition's current end offset {reach}{where}{others}. A batch read does not wait "
            f"for records to be written: {hint}use -1 (latest) for that partition, or an offset "
            f"<= {reach}")


def _check_same_partitions(option: str, given: Mapping[TopicPartitionKey, int],
                           tps: list[TopicPartitionKey]) -> None:
    """Like Spark: JSON offsets or timestamps must name exactly the partitions being read."""
    have, want = set(given), set(tps)
    if have == want:
        return
    missing = sorted(want - have)
    unknown = sorted(have - want)
    parts = []
    if missing:
        parts.append("missing " + describe_offsets({tp: -2 for tp in missing}).replace("@-2", ""))
    if unknown:
        parts.append("not part of the query (no such partition or topic, or not subscribed): "
                     + describe_offsets({tp: -2 for tp in unknown}).replace("@-2", ""))
    raise KafkaConfigError(
        f"option '{option}' must name every partition the query reads, and only those "
        f"({'; '.join(parts)}). Use -2 for earliest and -1 for latest.")
