"""Typed, secret-free errors for librdkafka (confluent-kafka) failures on secured clusters.

Why: against a secured Kafka, librdkafka's own errors are hard to act on.
- A failed TLS handshake or SASL login is reported only to ``error_cb`` (served by ``poll``); the
  call that waits (``init_transactions``, ``list_topics``, ``consume``) just times out with
  ``_TIMED_OUT``. :class:`SecurityErrorProbe` remembers that first cause so the time-out can be
  reported as what it is.
- Authorization errors do not name the resource: ``init_transactions`` says "Transactional Id
  authorization failed" without the id, a fetch says "Topic authorization failed" without the topic.
  :func:`translate_kafka_error` names the resource, the operations the principal needs and the ACL
  to add (observed against Apache Kafka 4.3.1 with the StandardAuthorizer, librdkafka 2.16).
- A missing READ or WRITE shows only when the first fetch or produce is refused, in a task:
  :func:`missing_topic_operations` asks the broker at query start which operations the principal
  has on a topic (KIP-430), so the query fails before any batch; :func:`wait_checking_security`
  makes a refused TLS/SASL login fail a start-time call within a second, not at its time-out.
Every text taken from librdkafka goes through :func:`~.secrets_redaction.redact_text`, its log
lines too (:class:`RedactingLog`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable, Mapping, TypeVar

from ..errors import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaConfigError,
    KafkaProtocolError,
    TxKafkaError,
)
from .error_codes import (
    _ALL_BROKERS_DOWN,
    _AUTHENTICATION,
    _INVALID_ARG,
    _MSG_TIMED_OUT,
    _SSL,
    _TIMED_OUT,
    _TRANSPORT,
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
)
from ..secrets_redaction import is_secret_key, redact_text

T = TypeVar("T")

_WAITING = {_TIMED_OUT, _ALL_BROKERS_DOWN, _TRANSPORT, _MSG_TIMED_OUT}

# What each side needs on a topic (see docs/operations-security.md).
TOPIC_OPERATIONS = {"reader": "READ and DESCRIBE", "writer": "WRITE and DESCRIBE"}
_ACL_OPTION = {"reader": ("READ", "DESCRIBE"), "writer": ("WRITE", "DESCRIBE")}


class RedactingLog:
    """librdkafka's ``logger`` for a client of ``conf``: each line goes to ``logger`` redacted.

    Why: librdkafka hides only the settings it marks sensitive. Its configuration dump
    (``kafka.debug=conf``) prints every other value, such as a
    kafka.sasl.oauthbearer.token.endpoint.url whose query or user info holds a credential.
    """

    def __init__(self, logger: logging.Logger, conf: Mapping[str, object]) -> None:
        self.logger = logger
        self._secrets = {k: v for k, v in conf.items()
                         if isinstance(v, str) and is_secret_key(str(k))}

    def log(self, level: int, msg: str, *args: object) -> None:
        """What confluent-kafka calls for each line (``logging.Logger.log``'s signature)."""
        if self.logger.isEnabledFor(level):
            self.logger.log(level, "%s", redact_text(msg % args if args else msg, self._secrets))

    def __repr__(self) -> str:
        return f"RedactingLog({self.logger.name})"


def _parts(err_or_exc: Any) -> tuple[int | None, str, str]:
    """(code, name, text) of a KafkaError, a KafkaException or any exception."""
    err = err_or_exc
    if isinstance(err_or_exc, BaseException) and err_or_exc.args and hasattr(
            err_or_exc.args[0], "code"):
        err = err_or_exc.args[0]
    code = getattr(err, "code", None)
    if callable(code):
        name_fn = getattr(err, "name", None)
        str_fn = getattr(err, "str", None)
        text = str_fn() if callable(str_fn) else str(err)
        return int(code()), str(name_fn() if callable(name_fn) else ""), str(text)
    return None, type(err).__name__, str(err)


def _is_tls_rejection(code: int | None, text: str) -> bool:
    # The broker refusing our client certificate arrives as a TLS alert on the first request.
    low = text.lower()
    return code == _TRANSPORT and ("alert" in low and ("certificate" in low or "ssl" in low))


def is_security_error(err_or_exc: Any) -> bool:
    """True for a TLS or SASL failure (bad CA, rejected client certificate, wrong password...)."""
    code, _name, text = _parts(err_or_exc)
    return code in (_AUTHENTICATION, _SSL, SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
                    ILLEGAL_SASL_STATE) or _is_tls_rejection(code, text)


class SecurityErrorProbe:
    """Pass ``probe.on_error`` as librdkafka's ``error_cb`` (or call it from yours).

    It keeps the first TLS/SASL failure (redacted); :func:`translate_kafka_error` given the probe
    reports a later time-out as that failure. Callbacks run only inside ``poll``/``flush``/
    ``consume``: after a blocking call fails, ``poll(0)`` once before translating.
    """

    def __init__(self, conf: Mapping[str, object]) -> None:
        self.conf = conf
        self._lock = threading.Lock()
        self._first: tuple[int | None, str, str] | None = None

    def on_error(self, err: Any) -> None:
        if is_security_error(err):
            code, name, text = _parts(err)
            with self._lock:
                if self._first is None:
                    self._first = (code, name, redact_text(text, self.conf))

    @property
    def security_error(self) -> tuple[int | None, str, str] | None:
        with self._lock:
            return self._first

    def clear(self) -> None:
        """Forget a remembered failure: a call that succeeded since shows the login works now (a
        long-lived client must not fail on a transient TLS error of a broker's rolling restart)."""
        with self._lock:
            self._first = None

    def raise_if_failed(self, action: str) -> None:
        """Raise the typed error for a remembered TLS/SASL failure, if any."""
        first = self.security_error
        if first is not None:
            raise _security(first[0], first[2], self.conf, action)

    def __repr__(self) -> str:
        return f"SecurityErrorProbe(failed={self._first is not None})"


def _security(code: int | None, text: str, conf: Mapping[str, object], action: str) -> TxKafkaError:
    proto = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    mech = str(conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "")
    user = conf.get("sasl.username")
    if code == _SSL:
        return KafkaAuthenticationError(
            f"{action}: TLS handshake failed ({proto}): {text}. Check kafka.ssl.ca.location (the CA "
            "that signed the broker's certificate) and that the broker's certificate names the host "
            "in kafka.bootstrap.servers (kafka.ssl.endpoint.identification.algorithm)."
        )
    if _is_tls_rejection(code, text):
        return KafkaAuthenticationError(
            f"{action}: the broker rejected the TLS connection ({proto}): {text}. The listener "
            "requires a client certificate it trusts: check kafka.ssl.certificate.location, "
            "kafka.ssl.key.location and kafka.ssl.key.password."
        )
    who = f" of user {user!r}" if user else ""
    return KafkaAuthenticationError(
        f"{action}: SASL {mech or '?'} authentication{who} failed ({proto}): {text}. Check "
        "kafka.sasl.mechanism, kafka.sasl.username and kafka.sasl.password (or "
        "kafka.sasl.jaas.config)."
    )


def _acl_hint(resource: str, name: str, ops: tuple[str, ...], prefixed: bool = False) -> str:
    flag = {"topic": "--topic", "group": "--group", "txn": "--transactional-id"}[resource]
    pattern = " --resource-pattern-type prefixed" if prefixed else ""
    return ("kafka-acls.sh --bootstrap-server ... --add --allow-principal User:<principal> "
            + " ".join(f"--operation {op}" for op in ops) + f" {flag} {name}{pattern}")


def translate_kafka_error(
    err_or_exc: Any,
    conf: Mapping[str, object],
    *,
    action: str,
    topic: str | None = None,
    group: str | None = None,
    transactional_id: str | None = None,
    role: str | None = None,
    probe: SecurityErrorProbe | None = None,
) -> TxKafkaError:
    """The typed, redacted error for a librdkafka failure. The caller raises it (``from None``).

    ``action`` says what was being done ("reading topic t", "init_transactions"); ``role`` is
    "reader" or "writer" (which topic operations are missing); ``probe`` turns a time-out that
    followed a TLS/SASL failure into that failure.
    """
    code, name, text = _parts(err_or_exc)
    text = redact_text(text, conf)
    if is_security_error(err_or_exc):
        return _security(code, text, conf, action)
    if code in _WAITING and probe is not None and probe.security_error is not None:
        first = probe.security_error
        return _security(first[0], first[2], conf, action)
    if code == TOPIC_AUTHORIZATION_FAILED:
        ops = _ACL_OPTION.get(role or "", ("READ", "WRITE", "DESCRIBE"))
        needs = TOPIC_OPERATIONS.get(role or "", "the operation's ACL (READ to read, WRITE to "
                                     "write, DESCRIBE for both)")
        where = f"topic {topic!r}" if topic else "a topic of this query"
        return KafkaAuthorizationError(
            f"{action}: not authorized on {where} (TOPIC_AUTHORIZATION_FAILED). The principal needs "
            f"{needs} on Topic:{topic or '<topic>'}: {_acl_hint('topic', topic or '<topic>', ops)}. "
            f"librdkafka: {text}"
        )
    if code == GROUP_AUTHORIZATION_FAILED:
        g = group if group is not None else conf.get("group.id")
        return KafkaAuthorizationError(
            f"{action}: not authorized on consumer group {g!r} (GROUP_AUTHORIZATION_FAILED). "
            f"librdkafka looks up the group coordinator even for assigned partitions: the principal "
            f"needs DESCRIBE on Group:{g} (READ to commit offsets): "
            f"{_acl_hint('group', str(g), ('DESCRIBE',))}. librdkafka: {text}"
        )
    if code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        tid = transactional_id if transactional_id is not None else conf.get("transactional.id")
        return KafkaAuthorizationError(
            f"{action}: not authorized for transactional id {tid!r} "
            f"(TRANSACTIONAL_ID_AUTHORIZATION_FAILED). The principal needs WRITE and DESCRIBE on "
            f"TransactionalId {tid!r}, usually as a PREFIXED ACL on the sink's prefix: "
            f"{_acl_hint('txn', '<transactionalIdPrefix>', ('WRITE', 'DESCRIBE'), True)}. "
            f"librdkafka: {text}"
        )
    if code == CLUSTER_AUTHORIZATION_FAILED:
        return KafkaAuthorizationError(
            f"{action}: not authorized on the cluster (CLUSTER_AUTHORIZATION_FAILED). Brokers older "
            "than 3.0 require the IdempotentWrite operation on the cluster for idempotent producers: "
            "kafka-acls.sh --bootstrap-server ... --add --allow-principal User:<principal> "
            f"--operation IdempotentWrite --cluster. librdkafka: {text}"
        )
    if code == _INVALID_ARG and any(k in text for k in ("ssl.key", "ssl.certificate", "ssl.ca",
                                                         "ssl.keystore")):
        return KafkaConfigError(
            f"{action}: librdkafka could not load the TLS files: {text}. Check the PEM files named "
            "by kafka.ssl.ca.location / kafka.ssl.certificate.location / kafka.ssl.key.location and "
            "kafka.ssl.key.password (an encrypted key with a wrong password reads as 'PEM lib')."
        )
    label = f" ({name})" if name else ""
    return KafkaProtocolError(f"{action} failed{label}: {text}")


# ------------------------------------------------------------------ waiting and access checks


def no_answer(e: BaseException) -> bool:
    """librdkafka's error for a request no broker answered (a time-out, a broken connection, every
    broker down): it says nothing about the cluster's settings."""
    return _parts(e)[0] in _WAITING


def wait_checking_security(call: Callable[[float], T], *, timeout_s: float, client: Any,
                           probe: SecurityErrorProbe, action: str, slice_s: float = 1.0) -> T:
    """``call(t)`` (a blocking librdkafka call or ``future.result``, given a timeout) in slices.

    A TLS or SASL failure never fails librdkafka's call: it waits for its whole timeout while the
    cause goes to ``error_cb``. Between slices this serves the client's callbacks
    (``client.poll(0)``: an AdminClient or Producer, never a Consumer) and raises the failure the
    probe saw, typed and redacted, within about a second instead of after the timeout. Other
    answers are returned or raised as they come; after ``timeout_s`` the last time-out is raised.
    """
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = call(max(0.01, min(slice_s, deadline - time.monotonic())))
            probe.clear()  # answered: whatever failed before is over
            return result
        except (KafkaException, FutureTimeout) as e:
            if isinstance(e, KafkaException) and _parts(e)[0] not in _WAITING:
                raise
            try:
                client.poll(0)
            except KafkaException:
                pass  # a fatal error re-raised by poll: the probe or the caller reports it
            if probe.security_error is None and time.monotonic() >= deadline:
                raise
        probe.raise_if_failed(action)  # outside the handler: no chained librdkafka time-out


def missing_topic_operations(admin: Any, topics: Iterable[str], needed: tuple[str, ...], *,
                             timeout_s: float, probe: SecurityErrorProbe | None = None,
                             action: str = "checking topic permissions") -> dict[str, list[str]]:
    """Topic -> the ``needed`` operations (``"READ"``, ``"WRITE"``) the principal lacks on it.

    Asks the broker which operations the principal may perform on each topic (Metadata with
    authorized operations, KIP-430: one request, nothing read or written). A topic the principal
    may not even DESCRIBE maps to ``["DESCRIBE", *needed]`` (Kafka answers so for a missing topic
    too). Topics the broker says do not exist, and brokers that do not report operations, map to
    nothing: the check never fails a query on a guess. Raises the TLS/SASL failure if the probe
    saw one, and librdkafka's error when the broker did not answer.
    """
    from confluent_kafka import KafkaException, TopicCollection

    names = sorted(set(topics))
    if not names:
        return {}
    futures = admin.describe_topics(TopicCollection(names), include_authorized_operations=True,
                                    request_timeout=timeout_s)
    missing: dict[str, list[str]] = {}
    for name, fut in futures.items():
        try:
            if probe is not None:
                desc = wait_checking_security(lambda t, f=fut: f.result(timeout=t),
                                              timeout_s=timeout_s + 5, client=admin, probe=probe,
                                              action=action)
            else:
                desc = fut.result(timeout=timeout_s + 5)
        except KafkaException as e:
            if _parts(e)[0] == TOPIC_AUTHORIZATION_FAILED:
                missing[name] = ["DESCRIBE", *needed]
                continue
            if _parts(e)[0] in _WAITING:
                raise
            continue  # unknown topic, unsupported request version...: nothing to say
        ops = {getattr(op, "name", str(op)) for op in (desc.authorized_operations or [])}
        if not ops:
            continue
        lacking = [op for op in needed if op not in ops]
        if lacking:
            missing[name] = lacking
    return missing


def topic_access_error(action: str, topic: str, lacking: list[str],
                       role: str) -> KafkaAuthorizationError:
    """The error for :func:`missing_topic_operations`' answer about one topic."""
    ops = _ACL_OPTION[role]
    if "DESCRIBE" in lacking:
        what = ("may not DESCRIBE it (TOPIC_AUTHORIZATION_FAILED; Kafka gives the same answer for "
                "a topic that does not exist when the principal may not DESCRIBE it)")
    else:
        what = (f"may DESCRIBE it but lacks {' and '.join(lacking)} (the broker would refuse every "
                f"{'fetch' if role == 'reader' else 'write'} with TOPIC_AUTHORIZATION_FAILED)")
    return KafkaAuthorizationError(
        f"{action}: the {role} principal is not authorized on topic {topic!r}: it {what}. The "
        f"{role} needs {TOPIC_OPERATIONS[role]} on Topic:{topic}: {_acl_hint('topic', topic, ops)}"
    )
