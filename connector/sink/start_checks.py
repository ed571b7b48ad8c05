"""Checks the sink makes against the cluster when a query starts, so misconfiguration fails early.

Spark has no query-start hook for Python writers, so these run in ``streamWriter()`` calls, which
Spark makes at every micro-batch, possibly in a new Python process each time.

A broker that cannot be asked (down, restarting, not answering) never fails them: the brokers that
answer are checked, the others are logged and asked again later. Only an answer that proves the
cluster unfit fails a query: a missing topic, a missing ACL, a broker without transaction partition
verification, a transaction timeout above a broker's cap. What an exactly-once query's checks found
is kept beside the sink's commit log (``start-checks.json``): a new driver process or a restarted
driver of the same query trusts it instead of asking again, and asks only the brokers that did not
answer before (at most every ``ASK_AGAIN_S``), so a broker outage mid-query costs no check time.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..client.connection import SecurityConfig, deadline_scope
from ..client.librdkafka_errors import (
    SecurityErrorProbe,
    missing_topic_operations,
    no_answer,
    topic_access_error,
    translate_kafka_error,
    wait_checking_security,
)
from ..errors import (
    CommitLogError,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaConfigError,
    KafkaProtocolError,
    TxKafkaError,
    UnsupportedBrokerError,
)
from ..client.config import RECONNECT_BACKOFF_MS, check_client_config
from .task_writer import SinkSchema, _ProducerProbe, producer_config
from ..secrets_redaction import redact_text
from .options import SinkConfig

if TYPE_CHECKING:
    from .commit_log import SinkCommitLog

log = logging.getLogger(__name__)
_quiet = logging.getLogger("txkafka.librdkafka.admin")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False

MAX_TIMEOUT = "transaction.max.timeout.ms"
VERIFICATION = "transaction.partition.verification.enable"
# AddPartitionsToTxn v4 (KIP-890's verification requests) came with Kafka 3.6, as did VERIFICATION.
ADD_PARTITIONS_TO_TXN = 24
_VERIFYING_ADD_PARTITIONS_VERSION = 4
# Brokers that did not answer are asked again at most this often (per driver process and, through
# the record, per query): each try can wait for a broker that is still down.
ASK_AGAIN_S = 30.0
# What one such try may wait for its answers (it runs while Spark plans or commits a batch).
ASK_AGAIN_TIMEOUT_S = 5.0
_RECORD_VERSION = 1


@dataclass(frozen=True)
class BrokerFacts:
    """What one broker told about the settings exactly_once depends on."""

    max_timeout_ms: int | None = None  # transaction.max.timeout.ms; None: not read
    verification: str | None = None    # VERIFICATION's value; None: not read, or not listed
    # Where VERIFICATION could not be read: whether the broker's API versions say Kafka 3.6+.
    verifies: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {"max_timeout_ms": self.max_timeout_ms, "verification": self.verification,
                "verifies": self.verifies}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "BrokerFacts":
        mt = d.get("max_timeout_ms")
        return cls(int(mt) if mt is not None else None, d.get("verification"), d.get("verifies"))


@dataclass
class CheckResult:
    """The brokers that answered (their facts) and those that could not be asked."""

    brokers: dict[int, BrokerFacts] = field(default_factory=dict)
    unasked: set[int] = field(default_factory=set)

    def merge(self, newer: "CheckResult") -> "CheckResult":
        brokers = {**self.brokers, **newer.brokers}
        return CheckResult(brokers, (self.unasked | newer.unasked) - set(newer.brokers))


@dataclass
class _Passed:
    """A configuration whose checks passed in this process, with the brokers still to ask."""

    unasked: frozenset[int]
    ask_at: float = 0.0  # time.monotonic() of the next try


_PASSED: dict[tuple, _Passed] = {}
_LOCK = threading.Lock()


def _key(cfg: SinkConfig) -> tuple:
    return (tuple(sorted(cfg.kafka.items())), cfg.topic, cfg.transaction_timeout_ms,
            cfg.exactly_once, cfg.transactional_id_prefix, cfg.producer, cfg.checkpoint_location)


def validate_at_start(cfg: SinkConfig, schema: SinkSchema, timeout_s: float = 30.0,
                      commit_log: SinkCommitLog | None = None) -> None:
    """The start checks, once per configuration and process; ``commit_log`` (an exactly-once
    streaming query's) keeps what they found for the query's later processes and restarts."""
    key = _key(cfg)
    with _LOCK:
        passed = _PASSED.get(key)
    if passed is not None:
        if passed.unasked and time.monotonic() >= passed.ask_at:
            _ask_again(cfg, key, passed, commit_log)
        return
    check_producer_config(cfg)
    if cfg.exactly_once or cfg.producer == "txkafka":
        # The driver's commit client and txkafka's own producer log in by themselves: settings
        # they cannot use (a SASL mechanism or an OAUTHBEARER token source they lack) fail here,
        # before the cluster is contacted, not in every task.
        SecurityConfig.from_kafka_config(cfg.kafka)
    record = _read_record(cfg, commit_log) if cfg.exactly_once else None
    if record is not None:
        # This query passed its checks before: what the brokers said then still counts, judged
        # against today's options (a refusal is left to fresh answers: the cluster may have
        # changed since); the brokers that did not answer are asked below.
        try:
            _judge(cfg, record.brokers)
        except KafkaConfigError:
            record = None
    if record is not None:
        passed = _remember(key, record)
        if passed.unasked:
            _ask_again(cfg, key, passed, commit_log)
        return
    result = _check_cluster(cfg, timeout_s)
    _remember(key, result, time.monotonic() + ASK_AGAIN_S)
    if cfg.exactly_once:
        _write_record(cfg, commit_log, result)


def _remember(key: tuple, result: CheckResult, ask_at: float = 0.0) -> _Passed:
    passed = _Passed(frozenset(result.unasked), ask_at)
    with _LOCK:
        _PASSED[key] = passed
    return passed


def check_producer_config(cfg: SinkConfig) -> None:
    """The producer every task will create, created once here: librdkafka's own checks of the
    kafka.* options (retries, in-flight requests, sizes) fail the query at start, not each task."""
    probe = _ProducerProbe(cfg.kafka)
    tid = f"{cfg.transactional_id_prefix}-config-check" if cfg.exactly_once else None
    check_client_config(producer_config(cfg, probe, tid, logger=_quiet), "producer")


def _admin(cfg: SinkConfig, probe: SecurityErrorProbe):
    from confluent_kafka.admin import AdminClient

    # allow.auto.create.topics: the metadata request for the topic must not create a missing one
    # (unless the user opted in with kafka.allow.auto.create.topics=true, as for the producer).
    return AdminClient({"allow.auto.create.topics": False,
                        "reconnect.backoff.ms": RECONNECT_BACKOFF_MS, **cfg.kafka, "logger": _quiet,
                        "error_cb": probe.on_error})


def _check_cluster(cfg: SinkConfig, timeout_s: float) -> CheckResult:
    from confluent_kafka import KafkaException

    probe = SecurityErrorProbe(cfg.kafka)
    admin = _admin(cfg, probe)
    action = "checking the sink's topic at start"
    try:
        # In slices: a refused TLS/SASL login fails here at once instead of after timeout_s.
        md = wait_checking_security(
            lambda t: admin.list_topics(topic=cfg.topic, timeout=t) if cfg.topic else
            admin.list_topics(timeout=t), timeout_s=timeout_s, client=admin, probe=probe,
            action=action)
    except KafkaException as e:
        admin.poll(0)
        err = translate_kafka_error(e, cfg.kafka, action=action,
                                    topic=cfg.topic, role="writer", probe=probe)
        if isinstance(err, (KafkaAuthorizationError, KafkaAuthenticationError)):
            raise err from None
        raise KafkaProtocolError(
            f"cannot reach Kafka at kafka.bootstrap.servers={cfg.bootstrap_servers}: "
            f"{redact_text(str(e), cfg.kafka)}"
        ) from None
    if cfg.topic:
        t = md.topics.get(cfg.topic)
        err = t.error if t is not None else None
        if t is None or (err is not None and "UNKNOWN_TOPIC" in err.name()):
            raise KafkaConfigError(
                f"topic {cfg.topic!r} (option 'topic') does not exist on {cfg.bootstrap_servers}; "
                "create it first (txkafka never auto-creates topics)"
            )
        if err is not None and "AUTHORIZATION" in err.name():
            raise topic_access_error(action, cfg.topic, ["DESCRIBE", "WRITE"], "writer")
        # DESCRIBE alone passes the metadata call; without WRITE every task's first produce would
        # be refused (its records purged): ask the broker for the principal's operations now.
        try:
            lacking = missing_topic_operations(admin, [cfg.topic], ("WRITE",), timeout_s=timeout_s,
                                               probe=probe, action=action)
        except (KafkaException, TimeoutError) as e:
            lacking = {}
            log.warning("could not check the writer's operations on topic %r (%s); going on",
                        cfg.topic, redact_text(str(e), cfg.kafka))
        if cfg.topic in lacking:
            raise topic_access_error(action, cfg.topic, lacking[cfg.topic], "writer")
    if not cfg.exactly_once:
        return CheckResult()
    _check_transactional_ids(cfg, timeout_s)
    if not md.brokers:
        return CheckResult()
    addresses = {b: (m.host, m.port) for b, m in md.brokers.items()}
    return check_broker_settings(cfg, admin, addresses, timeout_s)


def check_broker_settings(cfg: SinkConfig, admin, addresses: dict[int, tuple[str, int]],
                          timeout_s: float) -> CheckResult:
    """exactly_once: the transaction timeout within every broker's cap, and no broker that can
    leave a hanging transaction (invariant 13). Checks the brokers that answer; raises only on an
    answer that proves a broker unfit."""
    configs, unreadable, unasked = _broker_configs(admin, sorted(addresses), timeout_s, cfg)
    if unreadable:
        log.warning("cannot read the configuration of broker(s) %s (DescribeConfigs needs "
                    "DESCRIBE_CONFIGS on the cluster): not checking kafka.transaction.timeout.ms "
                    "against transaction.max.timeout.ms there", sorted(unreadable))
    facts: dict[int, BrokerFacts] = {}
    for b, entries in configs.items():
        cap = entries.get(MAX_TIMEOUT)
        facts[b] = BrokerFacts(int(cap) if cap is not None else None, entries.get(VERIFICATION))
    # Where the setting cannot be read (no DESCRIBE_CONFIGS, or a broker that does not list it:
    # Kafka before 3.6, or a managed service hiding it), the broker's API versions decide.
    by_version = unreadable | {b for b, f in facts.items() if f.verification is None}
    if by_version:
        verifies, silent = _verifies_by_version(cfg, {b: addresses[b] for b in by_version},
                                                timeout_s)
        for b, ok in verifies.items():
            facts[b] = BrokerFacts(facts[b].max_timeout_ms if b in facts else None, None, ok)
        for b in silent:
            facts.pop(b, None)
        unasked |= silent
    result = CheckResult(facts, unasked)
    _judge(cfg, facts)
    if unasked:
        log.warning("broker(s) %s did not answer the sink's start checks (down, restarting or "
                    "not answering within %.0fs); checked the others, and will ask these again "
                    "when they answer", sorted(unasked), timeout_s)
    return result


def _judge(cfg: SinkConfig, facts: dict[int, BrokerFacts]) -> None:
    """Raise if what the brokers told proves the cluster unfit for this configuration."""
    caps = [f.max_timeout_ms for f in facts.values() if f.max_timeout_ms is not None]
    if caps and cfg.transaction_timeout_ms > min(caps):
        cap = min(caps)
        raise KafkaConfigError(
            f"kafka.transaction.timeout.ms={cfg.transaction_timeout_ms} is above the broker's "
            f"transaction.max.timeout.ms={cap}; lower it to at most {cap} or raise the broker "
            "setting"
        )
    refused = {b: f.verification for b, f in sorted(facts.items())
               if (f.verification is not None and f.verification.strip().lower() != "true")
               or (f.verification is None and f.verifies is False)}
    if refused:
        raise UnsupportedBrokerError(_hanging_message(refused))
    hidden = sorted(b for b, f in facts.items() if f.verification is None and f.verifies)
    if hidden:
        log.warning("broker(s) %s: %s cannot be read, so txkafka cannot check it; they are Kafka "
                    "3.6 or newer, where it defaults to true. If it was set to false, exactly_once "
                    "can leave hanging transactions (docs/operations.md)", hidden, VERIFICATION)


def _broker_configs(admin, broker_ids: list[int], timeout_s: float, cfg: SinkConfig) -> tuple[
        dict[int, dict[str, str | None]], set[int], set[int]]:
    """({broker id: {name: value}} of the settings the sink depends on, for the brokers that
    answered; brokers that refused (DescribeConfigs needs DESCRIBE_CONFIGS on the cluster);
    brokers that did not answer within ``timeout_s``)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource

    futs = {}
    unreadable: set[int] = set()
    unasked: set[int] = set()
    for b in broker_ids:
        # One call per broker: librdkafka refuses two BROKER resources in one DescribeConfigs
        # (_CONFLICT), since each broker answers only for itself. The calls run concurrently.
        try:
            futs.update(admin.describe_configs([ConfigResource("broker", str(b))],
                                               request_timeout=timeout_s))
        except KafkaException as e:
            _sort_failure(b, e, unreadable, unasked, cfg)
    out: dict[int, dict[str, str | None]] = {}
    deadline = time.monotonic() + timeout_s
    for res, fut in futs.items():
        b = int(res.name)
        try:
            entries = fut.result(timeout=max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            unasked.add(b)
            continue
        except KafkaException as e:
            _sort_failure(b, e, unreadable, unasked, cfg)
            continue
        out[b] = {name: entries[name].value if name in entries else None
                  for name in (MAX_TIMEOUT, VERIFICATION)}
    return out, unreadable, unasked


def _sort_failure(broker: int, e: Exception, unreadable: set[int], unasked: set[int],
                  cfg: SinkConfig) -> None:
    """A broker that did not answer is asked again later; one that answered with an error (no
    DESCRIBE_CONFIGS) is judged by its version."""
    if no_answer(e):
        unasked.add(broker)
    else:
        log.debug("broker %d: DescribeConfigs failed: %s", broker, redact_text(str(e), cfg.kafka))
        unreadable.add(broker)


def _verifies_by_version(cfg: SinkConfig, addresses: dict[int, tuple[str, int]],
                         timeout_s: float) -> tuple[dict[int, bool], set[int]]:
    """({broker: it announces AddPartitionsToTxn v4+, i.e. Kafka 3.6+}, brokers that did not
    answer). A 3.6+ broker is taken to run with the setting's default (true), with a warning,
    since nothing else tells."""
    from .committer import shared_client

    client = shared_client(cfg.kafka, cfg.commit_timeout_ms / 1000.0)
    verifies: dict[int, bool] = {}
    silent: set[int] = set()
    with deadline_scope(timeout_s):
        for node, (host, port) in sorted(addresses.items()):
            try:
                top = client.api_versions(host, port).get(ADD_PARTITIONS_TO_TXN, (0, -1))[1]
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError as e:
                log.debug("broker %d: no API versions: %s", node, e)
                silent.add(node)
                continue
            verifies[node] = top >= _VERIFYING_ADD_PARTITIONS_VERSION
    return verifies, silent


def _hanging_message(refused: dict[int, str | None]) -> str:
    which = "; ".join(f"broker {b}: " + (f"{VERIFICATION}={v}" if v is not None else
                                         "no such setting (Kafka older than 3.6)")
                      for b, v in refused.items())
    return (
        f"deliveryGuarantee=exactly_once needs transaction partition verification on every broker "
        f"({VERIFICATION}=true, Kafka 3.6 or newer; it is the default there), and the cluster "
        f"lacks it: {which}. Without it, a record sent by a task attempt that Spark gave up on can "
        f"reach a partition after its transaction was aborted and start a transaction there that "
        f"the coordinator does not know (a hanging transaction): ListTransactions does not show "
        f"it, so txkafka cannot abort it, and read_committed readers of that partition stop at it "
        f"indefinitely. Upgrade to Kafka 3.6+ and set {VERIFICATION}=true (a dynamic setting: "
        f"kafka-configs.sh --bootstrap-server ... --alter --entity-type brokers --entity-default "
        f"--add-config {VERIFICATION}=true), or write with deliveryGuarantee=at_least_once."
    )


def _check_transactional_ids(cfg: SinkConfig, timeout_s: float) -> None:
    """DESCRIBE on the sink's transactional ids, at start (tasks would each fail init_transactions).

    DescribeTransactions of an id under the sink's prefix that no producer uses: the broker checks
    DESCRIBE on it and answers TRANSACTIONAL_ID_NOT_FOUND; nothing is created. WRITE cannot be
    checked without acting (InitProducerId): a principal with DESCRIBE only still fails in the
    tasks, with the id named. A coordinator that does not answer proves nothing: going on.
    """
    from .committer import shared_client

    probe_id = f"{cfg.transactional_id_prefix}-txkafka-acl-check"
    client = shared_client(cfg.kafka, cfg.commit_timeout_ms / 1000.0)
    try:
        with deadline_scope(timeout_s):
            client.describe([probe_id])
    except KafkaAuthorizationError:
        prefix = f"{cfg.transactional_id_prefix}-"
        raise KafkaAuthorizationError(
            f"checking the sink's transactional ids at start: the writer principal is not "
            f"authorized on TransactionalId {probe_id!r} (TRANSACTIONAL_ID_AUTHORIZATION_FAILED). "
            f"The sink's ids are '{prefix}{{sinkId}}-{{run}}-{{parity}}-{{partition}}-{{attempt}}' "
            f"(option transactionalIdPrefix={cfg.transactional_id_prefix!r}): the writer needs WRITE "
            f"and DESCRIBE on them, as a PREFIXED ACL: kafka-acls.sh --bootstrap-server ... --add "
            f"--allow-principal User:<principal> --operation WRITE --operation DESCRIBE "
            f"--transactional-id {prefix} --resource-pattern-type prefixed"
        ) from None
    except KafkaAuthenticationError:
        raise
    except (TxKafkaError, OSError) as e:
        log.warning("could not check the writer's access to its transactional ids (the "
                    "transaction coordinator did not answer: %s); going on: a task without it "
                    "fails naming the id", redact_text(str(e), cfg.kafka))


# ------------------------------------------------------------------ the query's record


def _target(cfg: SinkConfig) -> dict[str, Any]:
    """What a record applies to: this sink's cluster, topic and ids."""
    return {"bootstrap_servers": cfg.bootstrap_servers, "topic": cfg.topic,
            "transactional_id_prefix": cfg.transactional_id_prefix}


def _read_record(cfg: SinkConfig, commit_log: SinkCommitLog | None) -> CheckResult | None:
    """What the query's earlier checks found, if they were of this same sink."""
    if commit_log is None:
        return None
    try:
        raw = commit_log.read_start_checks()
    except CommitLogError as e:
        log.warning("%s; checking the cluster again", e)
        return None
    if not raw or raw.get("version") != _RECORD_VERSION or raw.get("target") != _target(cfg):
        return None
    try:
        brokers = {int(b): BrokerFacts.from_json(f) for b, f in raw.get("brokers", {}).items()}
        unasked = {int(b) for b in raw.get("unasked", [])}
    except (TypeError, ValueError, AttributeError):
        return None
    return CheckResult(brokers, unasked - set(brokers))


def _write_record(cfg: SinkConfig, commit_log: SinkCommitLog | None, result: CheckResult) -> None:
    if commit_log is None:
        return
    payload = {"version": _RECORD_VERSION, "target": _target(cfg),
               "updated_ms": int(time.time() * 1000),
               "brokers": {str(b): f.to_json() for b, f in sorted(result.brokers.items())},
               "unasked": sorted(result.unasked)}
    try:
        commit_log.write_start_checks(payload)
    except (TxKafkaError, OSError) as e:
        # The checks passed; without the record a later process only asks the cluster again.
        log.warning("could not record the sink's start checks under the checkpoint: %s", e)


def _ask_again(cfg: SinkConfig, key: tuple, passed: _Passed,
               commit_log: SinkCommitLog | None) -> None:
    """Ask the brokers that did not answer before (and any broker that joined since), briefly;
    raise only on an answer that proves one unfit. Nothing more is asked once all answered."""
    from confluent_kafka import KafkaException

    with _LOCK:
        passed.ask_at = time.monotonic() + ASK_AGAIN_S  # one try per interval, whatever happens
    probe = SecurityErrorProbe(cfg.kafka)
    admin = _admin(cfg, probe)
    try:
        md = (admin.list_topics(topic=cfg.topic, timeout=ASK_AGAIN_TIMEOUT_S) if cfg.topic
              else admin.list_topics(timeout=ASK_AGAIN_TIMEOUT_S))
    except KafkaException as e:
        log.info("could not ask broker(s) %s again (no metadata: %s); trying later",
                 sorted(passed.unasked), redact_text(str(e), cfg.kafka))
        return
    old = _read_record(cfg, commit_log) or CheckResult(unasked=set(passed.unasked))
    ask = {b: (m.host, m.port) for b, m in md.brokers.items()
           if b in passed.unasked or b not in old.brokers}
    if not ask:
        return  # the brokers still to ask are not in the cluster's metadata now (still down)
    result = old.merge(check_broker_settings(cfg, admin, ask, ASK_AGAIN_TIMEOUT_S))
    with _LOCK:
        passed.unasked = frozenset(result.unasked)
    _write_record(cfg, commit_log, result)
    if not result.unasked:
        log.info("the sink's start checks have now asked every broker")
