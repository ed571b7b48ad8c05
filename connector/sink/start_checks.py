"""Checks the sink makes against the cluster when a query starts, so misconfiguration fails early.

Spark has no query-start hook for Python writers, so these run in ``streamWriter()`` calls, which
Spark makes at every micro-batch, possibly in a new Python process each time.

A broker that cannot be asked (down, restarting, not answering) never fails them: the brokers that
answer are checked, the others are logged and asked again later. Only an answer that proves the
cluster unfit fails a query: a missing topic, a missing ACL, a broker that lacks a request the
exactly-once sink sends (transactions, DescribeTransactions, ListTransactions), a broker without
transaction partition verification or one whose setting cannot be read (unless the user
acknowledged that with ``assumeTransactionPartitionVerification``), a transaction timeout above a
broker's cap. What an exactly-once query's checks found is kept beside the sink's commit log
(``start-checks.json``, a cache: formats.START_CHECKS): a new driver process or a restarted driver
of the same query judges today's options against it instead of asking again, and asks only the
brokers that did not answer before and any broker id in the cluster's metadata that it never heard
from (at start, then at most every ``ASK_AGAIN_S``: one metadata request when nothing is new), so
a broker outage mid-query costs no check time and a broker that joins later is checked too.
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
    TransactionError,
    TxKafkaError,
    UnsupportedBrokerError,
)
from ..client.config import RECONNECT_BACKOFF_MS, check_client_config
from ..client.connection import ApiRange
from ..client.error_codes import error_name
from ..client.transactions import (
    COMMIT_CLIENT_APIS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    FIND_COORDINATOR,
    LIST_TRANSACTIONS,
)
from ..formats import START_CHECKS, is_current, stamp
from .task_writer import (
    LIBRDKAFKA_TRANSACTIONAL_APIS,
    SinkSchema,
    _ProducerProbe,
    producer_config,
)
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
ASSUME_OPTION = "assumeTransactionPartitionVerification"
# AddPartitionsToTxn v4 (KIP-890's verification requests) came with Kafka 3.6, as did VERIFICATION.
ADD_PARTITIONS_TO_TXN = 24
_VERIFYING_ADD_PARTITIONS_VERSION = 4
INIT_PRODUCER_ID = 22

# What UnsupportedBrokerError.missing names.
TRANSACTIONS = "transactions"
DESCRIBE_TRANSACTIONS_FEATURE = "DescribeTransactions"
LIST_TRANSACTIONS_FEATURE = "ListTransactions"
PARTITION_VERIFICATION = "transaction partition verification"
PROTOCOL_VERSIONS = "request versions"
# The requests without which a cluster has no Kafka transactions for a producer at all.
_TRANSACTION_KEYS = frozenset({FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN})
# Brokers that did not answer are asked again at most this often (per driver process and, through
# the record, per query): each try can wait for a broker that is still down.
ASK_AGAIN_S = 30.0
# What one such try may wait for its answers (it runs while Spark plans or commits a batch).
ASK_AGAIN_TIMEOUT_S = 5.0


def required_apis(cfg: SinkConfig) -> tuple[ApiRange, ...]:
    """The requests an exactly-once query sends: the driver's commit client's and its producer's."""
    if cfg.producer == "txkafka":
        from ..client.producer import TRANSACTIONAL_PRODUCER_APIS as producer
    else:
        producer = LIBRDKAFKA_TRANSACTIONAL_APIS
    return tuple(dict.fromkeys((*COMMIT_CLIENT_APIS, *producer)))  # both send EndTxn v0-4


def _recorded_keys() -> frozenset[int]:
    """The API keys whose versions the checks keep: every request either producer's query
    sends, and AddPartitionsToTxn, whose version tells Kafka 3.6+."""
    from ..client.producer import TRANSACTIONAL_PRODUCER_APIS

    return frozenset(a.key for a in (*COMMIT_CLIENT_APIS, *TRANSACTIONAL_PRODUCER_APIS,
                                     *LIBRDKAFKA_TRANSACTIONAL_APIS)) | {ADD_PARTITIONS_TO_TXN}


@dataclass(frozen=True)
class BrokerFacts:
    """What one broker told about what exactly_once depends on."""

    max_timeout_ms: int | None = None  # transaction.max.timeout.ms; None: not read
    verification: str | None = None    # VERIFICATION's value; None: not read, or not listed
    # {API key: (min, max)} the broker offers of the requests either producer's query sends (the
    # record is judged again with later options, another producer included); None: not asked.
    apis: dict[int, tuple[int, int]] | None = None

    @property
    def verifies(self) -> bool | None:
        """Whether the broker's API versions say Kafka 3.6+, where VERIFICATION exists (and
        defaults to true); None: not asked."""
        if self.apis is None:
            return None
        return self.apis.get(ADD_PARTITIONS_TO_TXN, (0, -1))[1] >= _VERIFYING_ADD_PARTITIONS_VERSION

    def to_json(self) -> dict[str, Any]:
        return {"max_timeout_ms": self.max_timeout_ms, "verification": self.verification,
                "apis": None if self.apis is None else
                {str(k): list(v) for k, v in sorted(self.apis.items())}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "BrokerFacts":
        mt, raw = d.get("max_timeout_ms"), d["apis"]
        apis = None if raw is None else {int(k): (int(v[0]), int(v[1])) for k, v in raw.items()}
        return cls(int(mt) if mt is not None else None, d.get("verification"), apis)


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
    """A configuration whose checks passed in this process: what the brokers told (and which did
    not answer), compared with the cluster's brokers again at ``ask_at``."""

    result: CheckResult
    ask_at: float = 0.0  # time.monotonic() of the next look


_PASSED: dict[tuple, _Passed] = {}
_LOCK = threading.Lock()


def _key(cfg: SinkConfig) -> tuple:
    return (tuple(sorted(cfg.kafka.items())), cfg.topic, cfg.transaction_timeout_ms,
            cfg.exactly_once, cfg.transactional_id_prefix, cfg.producer, cfg.checkpoint_location,
            cfg.assume_partition_verification)


def validate_at_start(cfg: SinkConfig, schema: SinkSchema, timeout_s: float = 30.0,
                      commit_log: SinkCommitLog | None = None) -> None:
    """The start checks, once per configuration and process; ``commit_log`` (an exactly-once
    streaming query's) keeps what they found for the query's later processes and restarts."""
    key = _key(cfg)
    with _LOCK:
        passed = _PASSED.get(key)
    if passed is not None:
        if cfg.exactly_once and time.monotonic() >= passed.ask_at:
            _ask_again(cfg, passed, commit_log)
        return
    check_producer_config(cfg)
    if cfg.exactly_once or cfg.producer == "txkafka":
        # The driver's commit client and txkafka's own producer log in by themselves: settings
        # they cannot use (a SASL mechanism or an OAUTHBEARER token source they lack) fail here,
        # before the cluster is contacted, not in every task.
        SecurityConfig.from_kafka_config(cfg.kafka)
    record = read_record(cfg, commit_log) if cfg.exactly_once else None
    if record is not None:
        # This query passed its checks before: what the brokers said then still counts, judged
        # against today's options (a refusal is left to fresh answers: the cluster may have
        # changed since); the brokers that did not answer, or joined since, are asked below.
        try:
            _judge(cfg, record.brokers)
        except KafkaConfigError:
            record = None
    if record is not None:
        _ask_again(cfg, _remember(key, record), commit_log)
        return
    result = _check_cluster(cfg, timeout_s)
    _remember(key, result, time.monotonic() + ASK_AGAIN_S)
    if cfg.exactly_once:
        write_record(cfg, commit_log, result)


def _remember(key: tuple, result: CheckResult, ask_at: float = 0.0) -> _Passed:
    passed = _Passed(result, ask_at)
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
    # What the brokers offer first: an ACL check through a request a broker lacks proves nothing.
    result = CheckResult()
    if md.brokers:
        addresses = {b: (m.host, m.port) for b, m in md.brokers.items()}
        result = check_broker_settings(cfg, admin, addresses, timeout_s)
    _check_transactional_ids(cfg, timeout_s)
    return result


def check_broker_settings(cfg: SinkConfig, admin, addresses: dict[int, tuple[str, int]],
                          timeout_s: float) -> CheckResult:
    """exactly_once: every broker offers the requests the sink sends, the transaction timeout is
    within every broker's cap, and no broker can leave a hanging transaction (invariant 13).
    Checks the brokers that answer; raises only on an answer that proves a broker unfit."""
    configs, unreadable, unasked = _broker_configs(admin, sorted(addresses), timeout_s, cfg)
    if unreadable:
        log.warning("cannot read the configuration of broker(s) %s (DescribeConfigs needs "
                    "DESCRIBE_CONFIGS on the cluster): not checking kafka.transaction.timeout.ms "
                    "against transaction.max.timeout.ms there", sorted(unreadable))
    # Every broker that answered: its API versions say which requests it serves, and, where the
    # setting cannot be read (no DESCRIBE_CONFIGS, a broker that does not list it: Kafka before
    # 3.6, or a managed service hiding it), whether it is Kafka 3.6+.
    apis, silent = _api_versions(cfg, {b: addresses[b] for b in addresses if b not in unasked},
                                 timeout_s)
    facts: dict[int, BrokerFacts] = {}
    for b in sorted(configs.keys() | apis.keys()):
        entries = configs.get(b, {})
        cap = entries.get(MAX_TIMEOUT)
        facts[b] = BrokerFacts(int(cap) if cap is not None else None, entries.get(VERIFICATION),
                               apis.get(b))
    for b in silent:  # answered DescribeConfigs, then stopped answering: asked again later,
        told = facts[b].verification if b in facts else None  # unless what it told refuses it
        if told is None or told.strip().lower() == "true":
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
    problems = _missing_requests(cfg, facts)
    refused = {b: f.verification for b, f in sorted(facts.items())
               if (f.verification is not None and f.verification.strip().lower() != "true")
               or (f.verification is None and f.verifies is False)}
    if refused:
        problems.append((PARTITION_VERIFICATION, _hanging_text(refused)))
    hidden = sorted(b for b, f in facts.items() if f.verification is None and f.verifies)
    if hidden and not cfg.assume_partition_verification:
        problems.append((PARTITION_VERIFICATION, _unreadable_text(hidden)))
    if problems:
        raise unsupported(cfg, problems)
    caps = [f.max_timeout_ms for f in facts.values() if f.max_timeout_ms is not None]
    if caps and cfg.transaction_timeout_ms > min(caps):
        cap = min(caps)
        raise KafkaConfigError(
            f"kafka.transaction.timeout.ms={cfg.transaction_timeout_ms} is above the broker's "
            f"transaction.max.timeout.ms={cap}; lower it to at most {cap} or raise the broker "
            "setting"
        )
    if hidden:
        log.warning("broker(s) %s: %s cannot be read, so txkafka cannot check it; they are Kafka "
                    "3.6 or newer, where it defaults to true, and option %s=true says every "
                    "broker runs with it on. If one does not, exactly_once can leave hanging "
                    "transactions (docs/operations.md)", hidden, VERIFICATION, ASSUME_OPTION)


def _missing_requests(cfg: SinkConfig, facts: dict[int, BrokerFacts]) -> list[tuple[str, str]]:
    """(feature, what is missing where) for each request the query sends that brokers lack."""
    lacking: dict[ApiRange, list[int]] = {}
    for b, f in sorted(facts.items()):
        for api in required_apis(cfg) if f.apis is not None else ():
            if not api.offered_by(f.apis):
                lacking.setdefault(api, []).append(b)
    wheres: dict[str, list[str]] = {}
    for api, brokers in lacking.items():
        feature = (TRANSACTIONS if api.key in _TRANSACTION_KEYS else
                   DESCRIBE_TRANSACTIONS_FEATURE if api.key == DESCRIBE_TRANSACTIONS else
                   LIST_TRANSACTIONS_FEATURE if api.key == LIST_TRANSACTIONS else PROTOCOL_VERSIONS)
        wheres.setdefault(feature, []).append(
            f"{api} is not offered by broker(s) {', '.join(map(str, brokers))}")
    why = {  # in the order the refusal names them
        TRANSACTIONS: "a service, or a tier of one, without Kafka transactions",
        DESCRIBE_TRANSACTIONS_FEATURE: "the driver validates every task's open transaction with "
                                       "it before it decides a batch; Kafka 3.0+",
        LIST_TRANSACTIONS_FEATURE: "the driver finds and aborts the transactions that failed task "
                                   "attempts left open with it; Kafka 3.0+",
        PROTOCOL_VERSIONS: "txkafka's protocol client sends them; Kafka 3.0 or newer offers them",
    }
    head = {TRANSACTIONS: "transactions are not available: "}
    return [(feature, f"{head.get(feature, '')}{'; '.join(wheres[feature])} ({text})")
            for feature, text in why.items() if feature in wheres]


def unsupported(cfg: SinkConfig, problems: list[tuple[str, str]]) -> UnsupportedBrokerError:
    """The one refusal of a cluster the exactly-once sink cannot run on: the cluster, what it
    lacks, and the alternatives."""
    missing = tuple(dict.fromkeys(feature for feature, _ in problems))
    return UnsupportedBrokerError(
        f"deliveryGuarantee=exactly_once cannot run on the cluster at kafka.bootstrap.servers="
        f"{cfg.bootstrap_servers}, which lacks {', '.join(missing)}: "
        f"{'; '.join(text for _, text in problems)}. Nothing was written. To write to this "
        f"cluster anyway, set deliveryGuarantee=at_least_once (idempotent writes without "
        f"transactions: a retried task can write its rows again, never lose them); what each "
        f"managed Kafka service offers: docs/managed-kafka.md.",
        cluster=cfg.bootstrap_servers, missing=missing)


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


def _api_versions(cfg: SinkConfig, addresses: dict[int, tuple[str, int]],
                  timeout_s: float) -> tuple[dict[int, dict[int, tuple[int, int]]], set[int]]:
    """({broker: the API versions it announced}, brokers that did not answer), through the
    driver's commit client, whose connections the commits then reuse."""
    from .committer import shared_client

    client = shared_client(cfg.kafka, cfg.commit_timeout_ms / 1000.0)
    keys = _recorded_keys()
    apis: dict[int, dict[int, tuple[int, int]]] = {}
    silent: set[int] = set()
    with deadline_scope(timeout_s):
        for node, (host, port) in sorted(addresses.items()):
            try:
                apis[node] = {k: tuple(v) for k, v in client.api_versions(host, port).items()
                              if k in keys}
            except KafkaAuthenticationError:
                raise
            except KafkaProtocolError as e:
                log.debug("broker %d: no API versions: %s", node, e)
                silent.add(node)
    return apis, silent


def _hanging_text(refused: dict[int, str | None]) -> str:
    which = "; ".join(f"broker {b}: " + (f"{VERIFICATION}={v}" if v is not None else
                                         "no such setting (Kafka older than 3.6)")
                      for b, v in refused.items())
    return (
        f"transaction partition verification is off ({which}), and exactly_once needs it on "
        f"every broker ({VERIFICATION}=true, Kafka 3.6 or newer; it is the default there). "
        f"Without it, a record sent by a task attempt that Spark gave up on can reach a partition "
        f"after its transaction was aborted and start a transaction there that the coordinator "
        f"does not know (a hanging transaction): ListTransactions does not show it, so txkafka "
        f"cannot abort it, and read_committed readers of that partition stop at it indefinitely. "
        f"Upgrade to Kafka 3.6+ and set {VERIFICATION}=true (a dynamic setting: kafka-configs.sh "
        f"--bootstrap-server ... --alter --entity-type brokers --entity-default --add-config "
        f"{VERIFICATION}=true)"
    )


def _unreadable_text(brokers: list[int]) -> str:
    return (
        f"transaction partition verification cannot be confirmed: broker(s) "
        f"{', '.join(map(str, brokers))} run Kafka 3.6 or newer (by their API versions) but did "
        f"not let txkafka read {VERIFICATION} (DescribeConfigs refused, or the setting left out "
        f"of its answer, as managed services may do), and a broker with it off can leave hanging "
        f"transactions. Grant the writer DescribeConfigs on the cluster (kafka-acls.sh "
        f"--bootstrap-server ... --add --allow-principal User:<writer> --operation DescribeConfigs "
        f"--cluster), or, if every broker runs with it on (its default) and the service does not "
        f"show it, acknowledge that txkafka cannot check it with option {ASSUME_OPTION}=true"
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
    except TransactionError as e:
        if e.code is None:  # retriable answers until the deadline: a coordinator still loading
            log.warning("could not check the writer's access to its transactional ids (%s); "
                        "going on: a task without it fails naming the id",
                        redact_text(str(e), cfg.kafka))
            return
        # A broker that answers FindCoordinator for a transactional id with an error that is
        # neither "retry" nor "not authorized" has no transaction coordinator for anyone.
        raise unsupported(cfg, [(TRANSACTIONS, (
            f"transactions are not available: FindCoordinator for transactional id {probe_id!r} "
            f"answered {error_name(e.code)}"))]) from None
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


def read_record(cfg: SinkConfig, commit_log: SinkCommitLog | None) -> CheckResult | None:
    """What the query's earlier checks found, if they were of this same sink, in the format this
    txkafka writes. The record is a cache: one in another format (an older txkafka's lacks what
    this one checks; a newer one's may mean something else) is never refused, only not trusted,
    and the cluster is asked again."""
    if commit_log is None:
        return None
    try:
        raw = commit_log.read_start_checks()
    except CommitLogError as e:
        log.warning("%s; checking the cluster again", e)
        return None
    if not raw or not is_current(START_CHECKS, raw) or raw.get("target") != _target(cfg):
        return None
    try:
        brokers = {int(b): BrokerFacts.from_json(f) for b, f in raw.get("brokers", {}).items()}
        unasked = {int(b) for b in raw.get("unasked", [])}
    except (TypeError, ValueError, AttributeError, KeyError, IndexError):
        return None
    return CheckResult(brokers, unasked - set(brokers))


def write_record(cfg: SinkConfig, commit_log: SinkCommitLog | None, result: CheckResult) -> None:
    """Keep what the checks found (passed checks only) for the query's later processes."""
    if commit_log is None:
        return
    payload = {**stamp(START_CHECKS), "target": _target(cfg),
               "updated_ms": int(time.time() * 1000),
               "brokers": {str(b): f.to_json() for b, f in sorted(result.brokers.items())},
               "unasked": sorted(result.unasked)}
    try:
        commit_log.write_start_checks(payload)
    except (TxKafkaError, OSError) as e:
        # The checks passed; without the record a later process only asks the cluster again.
        log.warning("could not record the sink's start checks under the checkpoint: %s", e)


def _ask_again(cfg: SinkConfig, passed: _Passed, commit_log: SinkCommitLog | None) -> None:
    """Compare the brokers in the cluster's metadata with those the checks heard from, and ask,
    briefly, the ones that did not answer before and any broker id they never heard of (the
    cluster grown, a broker replaced under a new id): a broker that joins with verification off
    or a lower transaction.max.timeout.ms must stop the query as at its start. Raises only on an
    answer that proves a broker unfit; one metadata request when every broker has answered."""
    from confluent_kafka import KafkaException

    with _LOCK:
        passed.ask_at = time.monotonic() + ASK_AGAIN_S  # one look per interval, whatever happens
    probe = SecurityErrorProbe(cfg.kafka)
    admin = _admin(cfg, probe)
    try:
        md = (admin.list_topics(topic=cfg.topic, timeout=ASK_AGAIN_TIMEOUT_S) if cfg.topic
              else admin.list_topics(timeout=ASK_AGAIN_TIMEOUT_S))
    except KafkaException as e:
        log.info("could not compare the cluster's brokers with those the sink's start checks "
                 "asked (no metadata: %s); trying later", redact_text(str(e), cfg.kafka))
        return
    # The record: another process of the query may have asked more since this one did.
    old = read_record(cfg, commit_log) or passed.result
    unasked = old.unasked | passed.result.unasked
    ask = {b: (m.host, m.port) for b, m in md.brokers.items()
           if b in unasked or b not in old.brokers}
    if not ask:
        return  # every broker answered before (those still to ask are not in the metadata now)
    joined = sorted(b for b in ask if b not in unasked)
    if joined:
        log.info("broker(s) %s joined the cluster since the sink's start checks: asking them",
                 joined)
    result = old.merge(check_broker_settings(cfg, admin, ask, ASK_AGAIN_TIMEOUT_S))
    with _LOCK:
        passed.result = result
    write_record(cfg, commit_log, result)
    if not result.unasked:
        log.info("the sink's start checks have now asked every broker")
