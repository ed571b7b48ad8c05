"""Rolling broker restarts under a running exactly-once query: the query never fails.

The 3-node KRaft cluster (replication factor 3, min.insync.replicas 2) and a Kafka -> txkafka ->
Kafka query (Spark, the txkafka source and sink, default options: exactly_once and the default
producer) whose input a transactional producer keeps feeding (some transactions aborted). Every
broker goes down once in turn in each of three ways: a controlled shutdown (SIGTERM), a crash
(SIGKILL), a freeze (SIGSTOP) longer than the request timeouts in force; between two outages the
test waits, as an operator does, until every replica is in sync again. The query must commit while
each node is down (SIGTERM, SIGKILL) and after it is back. One driver run takes all nine outages:
any query failure fails the test (a restart would hide it, so there is none); the output is then
verified read_committed for duplicates AND gaps, and no transaction of the sink may be left open.
With producer=librdkafka the same runs once: one broker (the first output partition's leader), in
the three ways.

The default-producer run gives every Spark planner call a new Python process
(spark.python.worker.reuse=false): the sink's start checks then run each time the writer is created,
during every outage, as they do whenever Spark replaces a planner process. Before they tolerated a
broker that does not answer, this run failed at the first freeze with the error operators saw
("Failed to initialize Python data source writer ... _broker_configs ... TimeoutError").

The sink's request timeout is lowered to 5 s (kafka.request.timeout.ms), and the freeze lasts 12 s:
longer than it, than txkafka's own 10 s per network attempt and than the cluster's
broker.session.timeout.ms (6 s), so requests time out and leadership moves during the freeze.
"""

from __future__ import annotations

import pytest

from integration_tests.chaos.campaign import OUTAGE_WAYS, Campaign, Crash, SparkTarget
from integration_tests.chaos.summary import ChaosSummary

pytestmark = [pytest.mark.kafka, pytest.mark.cluster3]

SINK_CONF = ("request.timeout.ms=5000",)
OUTAGE_S = 12.0
# Spark creates the writer at every batch in a planner Python process that it replaces after any
# failed call: the start checks then run again in a new process, in the middle of an outage. Here
# every call gets a new process, so they run during every outage.
NEW_PROCESS_EACH_CALL = SparkTarget(conf=("spark.python.worker.reuse=false",))


def _rolling(name: str, kafka3, tmp_path, producer: str, brokers: int, seed: int,
             spark: SparkTarget | None = None) -> Campaign:
    campaign = Campaign(name, kafka3, "map", tmp_path, producer=producer, seed=seed,
                        records_per_txn=30, feed_interval_s=0.4, max_offsets=3000,
                        sink_conf=SINK_CONF, outage_s=OUTAGE_S, spark=spark)
    campaign.run([Crash("rolling", how=",".join(OUTAGE_WAYS), brokers=brokers, last=True)])
    return campaign


def _assert_rode_through(campaign: Campaign, outages_per_way: int) -> None:
    r = campaign.result
    summary = ChaosSummary([r], title=campaign.name).text()
    print(summary)
    # Counted, not retried away: the one run must never have failed.
    assert r.query_failures == [], f"the query failed during a rolling restart\n{summary}"
    assert r.broker_outages == {w: outages_per_way for w in OUTAGE_WAYS}, summary
    assert len(r.rounds) == 1 and "ended by itself" in r.rounds[0].outcome, r.rounds
    assert r.duplicates == 0 and r.missing == 0 and r.unexpected == 0, f"{r.verify_text}\n{summary}"
    assert r.records_verified > 0 and r.records_verified == campaign.feeder.stats.records_committed, \
        r.verify_text
    assert r.final_open == [] and r.stale_open == 0, summary
    assert r.problems() == [] and r.ok, summary


@pytest.mark.timeout(1800)  # bounded inside by per-outage timeouts
def test_rolling_restarts_never_stop_an_exactly_once_query(kafka3, tmp_path):
    campaign = _rolling("rolling-restart-default", kafka3, tmp_path, "auto", brokers=0, seed=39,
                        spark=NEW_PROCESS_EACH_CALL)
    _assert_rode_through(campaign, outages_per_way=3)


@pytest.mark.timeout(1200)
def test_rolling_restart_with_librdkafka_once(kafka3, tmp_path):
    campaign = _rolling("rolling-restart-librdkafka", kafka3, tmp_path, "librdkafka", brokers=1,
                        seed=40)
    _assert_rode_through(campaign, outages_per_way=1)
