"""ListTransactions answered "coordinator loading / not available" is retried, not raised.

A broker that just started or took over coordinators answers COORDINATOR_LOAD_IN_PROGRESS or
COORDINATOR_NOT_AVAILABLE for a while; the sweep that follows a commit must ride that out.
"""

from __future__ import annotations

import pytest

from txkafka.connector.errors import TransactionError
from txkafka.connector.client.protocol import Reader, Writer
from txkafka.connector.client.error_codes import (
    CLUSTER_AUTHORIZATION_FAILED,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
)
from txkafka.connector.client.transactions import TransactionClient, TransactionListing


def _answer(err: int, listings=()) -> Reader:
    def listing(w: Writer, t: tuple[str, int, str]) -> None:
        w.string(t[0]).int64(t[1]).string(t[2]).tags()

    body = (Writer(True).int32(0).int16(err).array([], lambda w, s: w.string(s))
            .array(list(listings), listing).tags().build())
    return Reader(body, True)


class _Conn:
    """Answers in order; the last answer repeats."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = 0

    def version_for(self, api, lo, hi):
        return 0

    def throttle(self, throttle_ms):
        assert throttle_ms == 0

    def request(self, api, version, body, flexible):
        self.requests += 1
        return _answer(*(self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]))


def _client(monkeypatch, answers, timeout=5.0):
    tc = TransactionClient({"bootstrap.servers": "broker:9092"}, timeout=timeout)
    conn = _Conn(answers)
    monkeypatch.setattr(tc, "brokers", lambda: [(1, "broker", 9092)])
    monkeypatch.setattr(tc, "_conn", lambda host, port: conn)
    monkeypatch.setattr("txkafka.connector.client.transactions.time.sleep", lambda s: None)
    return tc, conn


@pytest.mark.parametrize("code", [COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE])
def test_loading_coordinators_are_waited_for(monkeypatch, code):
    tc, conn = _client(monkeypatch, [(code,), (code,), (0, [("p-1-0", 7, "Ongoing")])])
    assert tc.list_transactions(prefix="p-") == [TransactionListing("p-1-0", 7, "Ongoing")]
    assert conn.requests == 3


def test_a_coordinator_that_never_loads_fails_after_the_timeout(monkeypatch):
    tc, _ = _client(monkeypatch, [(COORDINATOR_LOAD_IN_PROGRESS,)], timeout=0.05)
    with pytest.raises(TransactionError, match="COORDINATOR_LOAD_IN_PROGRESS.*did not finish loading") as exc:
        tc.list_transactions()
    assert exc.value.code == COORDINATOR_LOAD_IN_PROGRESS


def test_other_errors_are_not_retried(monkeypatch):
    tc, conn = _client(monkeypatch, [(CLUSTER_AUTHORIZATION_FAILED,), (0,)])
    with pytest.raises(Exception, match="ListTransactions needs DESCRIBE"):
        tc.list_transactions()
    assert conn.requests == 1


def test_the_sweep_after_each_batch_reuses_the_broker_list_until_a_broker_fails(monkeypatch):
    """One Metadata request serves the sweeps of many batches (BROKER_LIST_MAX_AGE_S); a broker
    that stops answering makes the next attempt ask for the brokers afresh."""
    from txkafka.connector.client import transactions as tcm
    from txkafka.connector.errors import KafkaProtocolError

    tc = TransactionClient({"bootstrap.servers": "broker:9092"}, timeout=5.0)
    metadata = {"n": 0}

    def brokers_once():
        metadata["n"] += 1
        return [(1, "broker", 9092)]

    conn = _Conn([(0, [("p-1-0", 7, "Ongoing")])])
    monkeypatch.setattr(tc, "_brokers_once", brokers_once)
    monkeypatch.setattr(tc, "_conn", lambda host, port: conn)
    monkeypatch.setattr(tc, "_drop", lambda *a, **k: None)
    monkeypatch.setattr(tcm.time, "sleep", lambda s: None)
    for _ in range(5):
        assert len(tc.list_transactions(prefix="p-")) == 1
    assert metadata["n"] == 1

    fails = {"n": 2}  # the broker's connection breaks twice (request and its one reconnect)
    real = conn.request

    def request(*args, **kwargs):
        if fails["n"]:
            fails["n"] -= 1
            raise KafkaProtocolError("connection reset")
        return real(*args, **kwargs)

    monkeypatch.setattr(conn, "request", request)
    assert len(tc.list_transactions(prefix="p-")) == 1
    assert metadata["n"] == 2

    now = tcm.time.monotonic()
    monkeypatch.setattr(tcm.time, "monotonic", lambda: now + tcm.BROKER_LIST_MAX_AGE_S + 1)
    tc.list_transactions(prefix="p-")
    assert metadata["n"] == 3  # and at most that old
