"""Checks the sink makes against the cluster when a query starts, so misconfiguration fails early.

Spark has no query-start hook for Python writers, so these run in the first ``streamWriter()`` call
of each driver process and are cached for the life of that process.
"""

from __future__ import annotations

import logging
import threading

from ..client.connection import SecurityConfig
from ..client.librdkafka_errors import (
    SecurityErrorProbe,
    missing_topic_operations,
    topic_access_error,
    translate_kafka_error,
    wait_checking_security,
)
from ..errors import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaConfigError,
    KafkaProtocolError,
    UnsupportedBrokerError,
)
from ..client.config import RECONNECT_BACKOFF_MS, check_client_config
from .task_writer import SinkSchema, _ProducerProbe, producer_config
from ..secrets_redaction import redact_text
from .options import SinkConfig

log = logging.getLogger(__name__)
_quiet = logging.getLogger("txkafka.librdkafka.admin")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False

_DONE: set[tuple] = set()
_LOCK = threading.Lock()

MAX_TIMEOUT = "transaction.max.timeout.ms"
VERIFICATION = "transaction.partition.verification.enable"
# AddPartitionsToTxn v4 (KIP-890's verification requests) came with Kafka 3.6, as did VERIFICATION.
ADD_PARTITIONS_TO_TXN = 24
_VERIFYING_ADD_PARTITIONS_VERSION = 4


def validate_at_start(cfg: SinkConfig, schema: SinkSchema, timeout_s: float = 30.0) -> None:
    key = (tuple(sorted(cfg.kafka.items())), cfg.topic, cfg.transaction_timeout_ms, cfg.exactly_once,
           cfg.transactional_id_prefix, cfg.producer)
    with _LOCK:
        if key in _DONE:
            return
    check_producer_config(cfg)
    if cfg.exactly_once or cfg.producer == "txkafka":
        # The driver's commit client and txkafka's own producer log in by themselves: settings
        # they cannot use (a SASL mechanism or an OAUTHBEARER token source they lack) fail here,
        # before the cluster is contacted, not in every task.
        SecurityConfig.from_kafka_config(cfg.kafka)
    _check_cluster(cfg, timeout_s)
    with _LOCK:
        _DONE.add(key)


def check_producer_config(cfg: SinkConfig) -> None:
    """The producer every task will create, created once here: librdkafka's own checks of the
    kafka.* options (retries, in-flight requests, sizes) fail the query at start, not each task."""
    probe = _ProducerProbe(cfg.kafka)
    tid = f"{cfg.transactional_id_prefix}-config-check" if cfg.exactly_once else None
    check_client_config(producer_config(cfg, probe, tid, logger=_quiet), "producer")


def _check_cluster(cfg: SinkConfig, timeout_s: float) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    probe = SecurityErrorProbe(cfg.kafka)
    # allow.auto.create.topics: the metadata request for the topic must not create a missing one
    # (unless the user opted in with kafka.allow.auto.create.topics=true, as for the producer).
    admin = AdminClient({"allow.auto.create.topics": False,
                         "reconnect.backoff.ms": RECONNECT_BACKOFF_MS, **cfg.kafka, "logger": _quiet,
                         "error_cb": probe.on_error})
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
    if cfg.exactly_once:
        _check_transactional_ids(cfg, timeout_s)
    if not cfg.exactly_once or not md.brokers:
        return
    check_broker_settings(cfg, admin, sorted(md.brokers), timeout_s)


def check_broker_settings(cfg: SinkConfig, admin, broker_ids: list[int], timeout_s: float) -> None:
    """exactly_once: the transaction timeout within every broker's cap, and no broker that can
    leave a hanging transaction (invariant 13)."""
    configs = _broker_configs(admin, broker_ids, timeout_s, cfg)
    if configs is None:
        _refuse_brokers_before_3_6(cfg, set(broker_ids), "their configuration could not be read")
        return
    caps = [int(v) for e in configs.values() if (v := e.get(MAX_TIMEOUT)) is not None]
    if caps and cfg.transaction_timeout_ms > min(caps):
        cap = min(caps)
        raise KafkaConfigError(
            f"kafka.transaction.timeout.ms={cfg.transaction_timeout_ms} is above the broker's "
            f"transaction.max.timeout.ms={cap}; lower it to at most {cap} or raise the broker "
            "setting"
        )
    refused = hanging_transaction_brokers({b: e.get(VERIFICATION) for b, e in configs.items()})
    if any(v is not None for v in refused.values()):
        raise UnsupportedBrokerError(_hanging_message(refused))
    if refused:
        # Not in the answer: Kafka before 3.6, or a managed service that hides the setting.
        _refuse_brokers_before_3_6(cfg, set(refused), f"DescribeConfigs does not list {VERIFICATION}")


def _broker_configs(admin, broker_ids: list[int], timeout_s: float,
                    cfg: SinkConfig) -> dict[int, dict[str, str | None]] | None:
    """{broker id: {name: value}} of the settings the sink depends on, for every broker; None
    when the principal may not read broker configs (DescribeConfigs needs DESCRIBE_CONFIGS on
    the cluster)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource

    try:
        # One call per broker: librdkafka refuses two BROKER resources in one DescribeConfigs
        # (_CONFLICT), since each broker answers only for itself. The calls run concurrently.
        futs = {}
        for b in broker_ids:
            futs.update(admin.describe_configs([ConfigResource("broker", str(b))]))
        out = {}
        for res, fut in futs.items():
            entries = fut.result(timeout=timeout_s)
            out[int(res.name)] = {name: entries[name].value if name in entries else None
                                  for name in (MAX_TIMEOUT, VERIFICATION)}
        return out
    except KafkaException as e:
        log.warning("cannot read the brokers' configuration (%s; DescribeConfigs needs "
                    "DESCRIBE_CONFIGS on the cluster): not checking kafka.transaction.timeout.ms "
                    "against transaction.max.timeout.ms", redact_text(str(e), cfg.kafka))
        return None


def hanging_transaction_brokers(values: dict[int, str | None]) -> dict[int, str | None]:
    """Brokers that can leave a hanging transaction: {broker id: the setting's value, None when
    the broker does not know it (Kafka before 3.6)}."""
    return {b: v for b, v in sorted(values.items()) if (v or "").strip().lower() != "true"}


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


def _refuse_brokers_before_3_6(cfg: SinkConfig, broker_ids: set[int], why: str) -> None:
    """Where the setting cannot be read: refuse brokers too old to verify (by the API versions
    they announce); a 3.6+ broker is taken to run with the setting's default (true), with a
    warning, since nothing else tells."""
    from .committer import shared_client

    client = shared_client(cfg.kafka, cfg.commit_timeout_ms / 1000.0)
    old: dict[int, str | None] = {}
    for node, host, port in client.brokers():
        if node not in broker_ids:
            continue
        top = client.api_versions(host, port).get(ADD_PARTITIONS_TO_TXN, (0, -1))[1]
        if top < _VERIFYING_ADD_PARTITIONS_VERSION:
            old[node] = None
    if old:
        raise UnsupportedBrokerError(_hanging_message(old))
    log.warning("broker(s) %s: %s, so txkafka cannot check %s; they are Kafka 3.6 or newer, "
                "where it defaults to true. If it was set to false, exactly_once can leave hanging "
                "transactions (docs/operations.md)", sorted(broker_ids), why, VERIFICATION)


def _check_transactional_ids(cfg: SinkConfig, timeout_s: float) -> None:
    """DESCRIBE on the sink's transactional ids, at start (tasks would each fail init_transactions).

    DescribeTransactions of an id under the sink's prefix that no producer uses: the broker checks
    DESCRIBE on it and answers TRANSACTIONAL_ID_NOT_FOUND; nothing is created. WRITE cannot be
    checked without acting (InitProducerId): a principal with DESCRIBE only still fails in the
    tasks, with the id named.
    """
    from .committer import shared_client

    probe_id = f"{cfg.transactional_id_prefix}-txkafka-acl-check"
    client = shared_client(cfg.kafka, cfg.commit_timeout_ms / 1000.0)
    try:
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
