"""Fault-injection points for the exactly-once proof. Inert unless armed.

Armed only from the environment of the processes that run the sink and the reader, never by a
query option (a user's option space has no test machinery in it):

- ``TXKAFKA_FAULT_INJECTION``: the spec itself, for processes started with it (a driver program
  and, through ``spark.executorEnv``, its executors);
- ``TXKAFKA_FAULT_INJECTION_FILE``: a file holding the spec, read again whenever an injector is
  asked for (a committer or a task writer is created), so a test session whose Spark was started
  once can arm and disarm faults per test (``armed()``).

A spec is ``;``-separated rules, each a ``,``-separated list of ``key=value``:

    point=after_decision,batch=3,action=kill,once=/tmp/marker

- ``point``: where (see POINTS).
- ``action``: ``raise`` (an InjectedFault exception), ``kill`` (SIGKILL every process of this
  session: the whole driver when the query runs in its own session, as the tests and the demo do),
  ``exit`` (this Python worker dies),
  ``sleep`` (``ms=`` milliseconds), ``wait_for`` (until the local file ``path=`` exists, at most
  ``ms=`` milliseconds: e.g. Spark's ``commits/N``, to write after batch N is done).
- filters: ``batch``, ``partition``, ``attempt``, ``nth`` (the nth time the point is reached in
  this process, from 1); a rule fires only when all given filters match.
- ``once=PATH``: fire at most once across processes and restarts (the marker file is created
  atomically when it fires). It holds one line, ``POINT TIME pid=PID batch=B partition=P
  attempt=A``: which process fired and in which task, so a test can find and kill the executor
  that runs it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Iterator

from .errors import KafkaConfigError, TxKafkaError

ENV_VAR = "TXKAFKA_FAULT_INJECTION"
FILE_ENV_VAR = "TXKAFKA_FAULT_INJECTION_FILE"

POINTS = frozenset({
    # task side (writer)
    "before_first_produce",  # transaction begun (client side), before its first record is sent
    "before_precommit",   # records produced, before flush/verify
    "after_precommit",    # transaction flushed and left open, before the late check and return
    # driver side (writer)
    "before_decision",    # transactions validated, decision not yet written
    "after_decision",     # decision durable, no EndTxn sent yet
    "between_endtxn",     # after the first EndTxn(commit) of a batch with several transactions
    "after_sink_commit",  # every EndTxn done and recorded; Spark has not written commits/N yet
    "during_recovery",    # roll-forward of a decided batch, after its first EndTxn
    # task side (reader)
    "read_partition",     # an executor is about to fetch an offset range
})
ACTIONS = frozenset({"raise", "kill", "exit", "sleep", "wait_for"})

log = logging.getLogger(__name__)


class InjectedFault(TxKafkaError):
    """Raised by an armed ``raise`` rule; never raised in production."""


@dataclass
class FaultRule:
    point: str
    action: str = "raise"
    filters: dict[str, int] = field(default_factory=dict)
    once: str | None = None
    ms: int = 0
    hits: int = 0
    path: str | None = None

    def matches(self, point: str, ctx: dict[str, int | None]) -> bool:
        if point != self.point:
            return False
        self.hits += 1
        for key, want in self.filters.items():
            got = self.hits if key == "nth" else ctx.get(key)
            if got is None or int(got) != want:
                return False
        return True


def parse_spec(spec: str) -> list[FaultRule]:
    rules = []
    for raw in spec.split(";"):
        raw = raw.strip()
        if not raw:
            continue
        kv: dict[str, str] = {}
        for part in raw.split(","):
            if "=" not in part:
                raise KafkaConfigError(f"fault-injection rule {raw!r}: {part!r} is not key=value")
            k, v = part.split("=", 1)
            kv[k.strip()] = v.strip()
        point = kv.pop("point", "")
        if point not in POINTS:
            raise KafkaConfigError(f"fault-injection point {point!r} is not one of {sorted(POINTS)}")
        action = kv.pop("action", "raise")
        if action not in ACTIONS:
            raise KafkaConfigError(f"fault-injection action {action!r} is not one of {sorted(ACTIONS)}")
        once = kv.pop("once", None)
        ms = int(kv.pop("ms", "0"))
        path = kv.pop("path", None)
        if action == "wait_for" and not path:
            raise KafkaConfigError(f"fault-injection rule {raw!r}: wait_for needs path=")
        filters = {}
        for k, v in kv.items():
            if k not in ("batch", "partition", "attempt", "nth"):
                raise KafkaConfigError(f"fault-injection filter {k!r} is unknown")
            filters[k] = int(v)
        rules.append(FaultRule(point, action, filters, once, ms, path=path))
    return rules


def merge_specs(*specs: str | None) -> str:
    """One spec holding every rule of ``specs`` once, in order."""
    rules: list[str] = []
    for spec in specs:
        for rule in (spec or "").split(";"):
            if rule.strip() and rule.strip() not in rules:
                rules.append(rule.strip())
    return ";".join(rules)


def armed_spec() -> str:
    """The spec the environment arms: the variable's, then the file's (empty when neither)."""
    spec = os.environ.get(ENV_VAR)
    if spec:
        return spec
    path = os.environ.get(FILE_ENV_VAR)
    if not path:
        return ""
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def arm(spec: str) -> None:
    """Arm ``spec`` for every process of this test session, through the file
    ``TXKAFKA_FAULT_INJECTION_FILE`` names (the session sets the variable before its Spark
    starts, so every Python worker reads the file); ``disarm()`` ends it."""
    path = os.environ.get(FILE_ENV_VAR)
    if not path:
        raise RuntimeError(f"{FILE_ENV_VAR} is not set: the test session arms faults through it")
    parse_spec(spec)  # a malformed rule fails here, in the test, not in a worker
    with open(path, "w") as fh:
        fh.write(spec)
    FaultInjector._cache.clear()


def disarm() -> None:
    """Disarm the session's file and forget this process's injectors."""
    path = os.environ.get(FILE_ENV_VAR)
    if path:
        with open(path, "w"):
            pass
    FaultInjector._cache.clear()


@contextlib.contextmanager
def armed(spec: str) -> Iterator[None]:
    """``arm(spec)`` for the block."""
    arm(spec)
    try:
        yield
    finally:
        disarm()


class FaultInjector:
    """Checks armed rules at named points; a no-op object when nothing is armed."""

    _cache: dict[str, "FaultInjector"] = {}

    def __init__(self, rules: list[FaultRule]) -> None:
        self.rules = rules

    @classmethod
    def get(cls, spec: str | None = None) -> "FaultInjector":
        """The injector for ``spec``, else for what the environment arms; shared per process
        and spec (``nth`` counts per process)."""
        spec = spec or armed_spec()
        inj = cls._cache.get(spec)
        if inj is None:
            inj = cls._cache[spec] = cls(parse_spec(spec)) if spec else cls([])
        return inj

    @property
    def armed(self) -> bool:
        return bool(self.rules)

    def check(self, point: str, *, batch: int | None = None, partition: int | None = None,
              attempt: int | None = None) -> None:
        if not self.rules:
            return
        ctx = {"batch": batch, "partition": partition, "attempt": attempt}
        for rule in self.rules:
            if rule.matches(point, ctx) and self._claim(rule, ctx):
                self._fire(rule, ctx)

    @staticmethod
    def _claim(rule: FaultRule, ctx: dict[str, int | None]) -> bool:
        if not rule.once:
            return True
        try:
            fd = os.open(rule.once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        where = " ".join(f"{k}={ctx.get(k)}" for k in ("batch", "partition", "attempt"))
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{rule.point} {time.time()} pid={os.getpid()} {where}\n")
        return True

    @staticmethod
    def _fire(rule: FaultRule, ctx: dict) -> None:
        where = f"{rule.point} (batch={ctx.get('batch')}, partition={ctx.get('partition')})"
        log.warning("fault injection: %s at %s", rule.action, where)
        print(f"TXKAFKA-FAULT {rule.action} at {where}", flush=True)
        if rule.action == "raise":
            raise InjectedFault(f"injected fault at {where}")
        if rule.action == "sleep":
            time.sleep(rule.ms / 1000.0)
            return
        if rule.action == "wait_for":
            deadline = time.monotonic() + rule.ms / 1000.0
            while rule.path and not os.path.exists(rule.path) and time.monotonic() < deadline:
                time.sleep(0.05)
            return
        if rule.action == "exit":
            os._exit(17)
        if rule.action == "kill":
            _kill_session()


def _kill_session() -> None:
    """SIGKILL every process of this session: the driver, its JVM and every Python worker.

    PySpark's daemon puts workers in their own process group, so killing the group would only kill
    the worker and let the JVM carry on (and run abort()). A driver started in its own session (as
    the tests and the demo do) dies as a whole, like a crashed machine.
    """
    me = os.getpid()
    sid = os.getsid(0)
    victims = []
    try:
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != me:
                try:
                    if os.getsid(int(entry)) == sid:
                        victims.append(int(entry))
                except OSError:
                    continue
    except OSError:
        pass
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os.kill(me, signal.SIGKILL)


def read_marker(path: str) -> dict[str, object]:
    """A ``once`` marker's line as {"point", "time", "pid", "batch", "partition", "attempt"}
    (values None where the marker does not say); {} while it is still being written."""
    try:
        with open(path) as fh:
            line = fh.read()
    except OSError:
        return {}
    words = line.split()
    if not line.endswith("\n") or len(words) < 2:
        return {}
    out: dict[str, object] = {"point": words[0], "time": float(words[1])}
    for word in words[2:]:
        k, _, v = word.partition("=")
        out[k] = int(v) if v.lstrip("-").isdigit() else None
    return out
