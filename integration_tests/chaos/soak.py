"""The long chaos soak: hundreds of crash rounds, a JSON summary.

    python -m integration_tests.chaos.soak --rounds 200 --out docs/soak-results.json --seed 2026

Why a separate command: CI runs a bounded set of rounds (integration_tests/test_chaos.py); the soak
runs the same campaigns many times with random crash choices, on clusters started once and
reused (a 3-node transaction.version=2 cluster, a 1-node transaction.version=0 broker, a Spark
standalone cluster of two single-core workers). Each campaign is a fresh pipeline (topics and
checkpoint) of ``--rounds-per-campaign`` rounds, verified at its end; every campaign on the 3-node
cluster has one rolling restart among its rounds (every broker down in turn under the running
query, the ways taking turns: sigterm, sigkill, sigstop), whose query failures its verdict counts
(campaign.py, ``rolling``); the JSON is rewritten after
every campaign, so an interrupted soak still leaves its results. Exit code 0 only if every
campaign's verdict is ok (summary.py: its planned rounds ran, the crashes it asked for landed,
records verified exactly once, nothing left open, no unexpected query failure); a campaign cut
short by an exception (its verifier's included) stays in the JSON with the error, failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from integration_tests.chaos.campaign import (
    DRIVER_POINTS,
    OUTAGE_WAYS,
    TASK_POINTS,
    Campaign,
    Crash,
    SparkTarget,
)
from integration_tests.chaos.summary import CampaignResult, ChaosSummary
from integration_tests.kafka_helpers import KafkaTarget
from txkafka.embedded_kafka import EmbeddedKafka

# A task crash rides along a round's own crash, which may end the run before the task reaches
# its point (a random kill, a kill at a driver point of an earlier batch).
TASK_EXIT_OPTIONAL = {f"task-exit:{p}": "rides along the round's crash, which may come first"
                      for p in TASK_POINTS}

# (mode, cluster, spark) of each campaign, in rotation.
PROFILES = [
    ("map", "tv2", "local"),
    ("aggregate", "tv2", "local"),
    ("map", "tv0", "local"),
    ("aggregate", "tv2", "standalone"),
    ("aggregate", "tv0", "local"),
    ("map", "tv2", "standalone"),
]


# Share of rounds that are an operator action (campaign.py: relayout, rollback, savepoint).
OPERATOR_SHARE = 0.25


def _reachable(campaign: Campaign, points) -> list[str]:
    """The points a run of the campaign's current layout passes: with one write task a batch has
    one transaction, so a kill between two EndTxn calls would never land."""
    return [p for p in points if not (p == "between_endtxn" and campaign.layout.one_task)]


def choose_operator_step(rng: random.Random, campaign: Campaign) -> Crash:
    """A random operator action: a restart with another layout (sometimes after losing a decided
    batch to the transaction timeout), a rolled-back checkpoint (the input unchanged or not,
    recovered by restoring the files or by a savepoint), or a move to a changed query on a new
    checkpoint by a savepoint after a kill (map only: a savepoint carries no aggregation state)."""
    standalone = campaign.spark.kind == "standalone"
    kill_points = [p for p in DRIVER_POINTS if p != "during_recovery"] + (
        [] if standalone else ["before_precommit", "after_precommit"])
    kill_points = _reachable(campaign, kill_points)
    kinds = ["relayout", "rollback"] + (["savepoint"] if campaign.mode == "map" else [])
    kind = rng.choice(kinds)
    if kind == "relayout":
        return Crash("relayout", "redo" if rng.random() < 0.4 else None)
    if kind == "rollback":
        how = rng.choice(["restore", "savepoint"]) if campaign.mode == "map" else "restore"
        return Crash("rollback", "same" if rng.random() < 0.5 else None, how=how)
    return Crash("savepoint", rng.choice([None, *kill_points]))


def campaign_producer(choice: str, n: int) -> str:
    """The sink's producer of campaign ``n`` (1-based) under ``--producer``."""
    if choice == "both":
        return "librdkafka" if n % 2 else "txkafka"
    return choice


def choose_crash(rng: random.Random, campaign: Campaign, cluster_nodes: int) -> Crash:
    """A random crash that can happen in this campaign's set-up (a kill in an executor would take
    the standalone worker down with it, so task-side kills are local-mode only), or now and then
    an operator action once the pipeline committed a batch."""
    standalone = campaign.spark.kind == "standalone"
    points = _reachable(campaign, list(DRIVER_POINTS) + ([] if standalone else list(TASK_POINTS)))
    # A task's worker crashing at a task-side point, on top of the round's crash.
    task_exit = rng.choice(TASK_POINTS) if rng.random() < 0.25 else None
    if campaign.pending_decision_size() < 2:
        points.remove("during_recovery")
    elif rng.random() < 0.5:
        return Crash("point", "during_recovery")  # a decided batch is waiting: crash its recovery
    if campaign.committed() >= 0 and rng.random() < OPERATOR_SHARE:
        return choose_operator_step(rng, campaign)
    roll = rng.random()
    if cluster_nodes == 3 and roll < 0.08:
        return Crash("broker", task_exit=task_exit)
    if standalone and roll < 0.30:
        return Crash("executor", rng.choice([None, *_reachable(campaign, DRIVER_POINTS[:-1])]),
                     task_exit=task_exit)
    if roll < 0.20:
        return Crash("random", task_exit=task_exit)
    point = rng.choice(points)
    return Crash("point", point, task_exit=task_exit if task_exit != point else None)


class Clusters:
    """The soak's Kafka clusters and Spark standalone cluster, started once."""

    def __init__(self, root: Path) -> None:
        from integration_tests.spark_standalone import SparkStandalone

        self.tv2 = EmbeddedKafka("soak-tv2", 3, root=root / "kafka-tv2")
        self.tv0 = EmbeddedKafka("soak-tv0", 1, root=root / "kafka-tv0", transaction_version=0)
        self.spark = SparkStandalone(root / "spark")

    def start(self) -> None:
        self.tv2.start(timeout=300)
        self.tv0.start(timeout=300)
        self.spark.start()

    def kafka(self, name: str) -> KafkaTarget:
        cluster = self.tv2 if name == "tv2" else self.tv0
        if not cluster.is_running():  # a failed round may have left a node down
            for n in cluster.node_infos:
                cluster.start_node(n.node_id)
            cluster.wait_ready(180)
        return KafkaTarget(cluster.bootstrap_servers, "native", cluster)

    def stop(self) -> None:
        for c in (self.tv2, self.tv0):
            c.destroy()
        self.spark.stop()


def _resume(path: Path, seed: int) -> tuple[ChaosSummary, list[dict], list[str]]:
    """The campaigns, sittings and errors of an earlier run of the same soak (same seed)."""
    import json

    data = json.loads(path.read_text())
    title = data.get("title", "")
    if f"(seed {seed})" not in title:
        raise SystemExit(f"error: {path} is the soak {title!r}, not seed {seed}; resume with its "
                         "seed or write to another --out")
    summary = ChaosSummary([CampaignResult.from_json(c) for c in data.get("campaigns", [])],
                           title=title)
    meta = data.get("meta", {})
    sittings = meta.get("sittings") or [
        {k: meta[k] for k in ("command", "started", "finished", "seconds") if k in meta}]
    return summary, sittings, list(meta.get("errors", []))


def _verified_rounds(summary: ChaosSummary) -> int:
    """Rounds that count towards --rounds: those of campaigns that ran to the end and verified
    (the campaign being started is not ok yet, so it is not counted)."""
    return sum(len(c.rounds) for c in summary.campaigns if c.ok)


def run_soak(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if args.resume and out.exists():
        summary, sittings, errors = _resume(out, args.seed)
    else:
        summary, sittings, errors = ChaosSummary(title=f"txkafka chaos soak (seed {args.seed})"), [], []
    # A resumed sitting draws its crashes from a generator of its own, seeded by the seed and the
    # number of campaigns before it, so every sitting of a soak is reproducible.
    rng = random.Random(args.seed if not summary.campaigns else f"{args.seed}-{len(summary.campaigns)}")
    root = Path(args.workdir or tempfile.mkdtemp(prefix="txkafka-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    sitting = {
        "command": " ".join(["python -m integration_tests.chaos.soak", *sys.argv[1:]]),
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "campaigns_before": len(summary.campaigns),
    }
    meta = {
        "host": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "errors": errors,
    }
    clusters = Clusters(root / "clusters")
    started = time.monotonic()
    failed = not all(c.ok for c in summary.campaigns)

    def save() -> None:
        payload = summary.to_json()
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        this = {**sitting, "finished": now, "seconds": round(time.monotonic() - started, 1)}
        payload["meta"] = {**meta, "sittings": [*sittings, this],
                           "seconds": round(sum(s.get("seconds", 0) for s in sittings)
                                            + this["seconds"], 1)}
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        import json

        out.write_text(json.dumps(payload, indent=1) + "\n")

    running: tuple[Campaign, CampaignResult] | None = None  # the campaign under way, if any
    rolling_steps = sum(len(c.broker_outages) for c in summary.campaigns)
    try:
        clusters.start()
        n = len(summary.campaigns)
        while _verified_rounds(summary) < args.rounds:
            if args.max_hours and time.monotonic() - started > args.max_hours * 3600:
                meta["errors"].append(f"stopped after {args.max_hours} h")
                break
            mode, cluster_name, spark_kind = PROFILES[n % len(PROFILES)]
            n += 1
            kafka = clusters.kafka(cluster_name)
            spark = SparkTarget.on_cluster(clusters.spark) if spark_kind == "standalone" \
                else SparkTarget()
            workdir = root / f"campaign{n:03d}"
            producer = campaign_producer(args.producer, n)
            campaign = Campaign(f"soak{n:03d}-{mode}-{cluster_name}-{spark_kind}"
                                + ("-wire" if producer == "txkafka" else ""), kafka, mode,
                                workdir, spark=spark, seed=rng.randrange(1 << 30),
                                transaction_version=2 if cluster_name == "tv2" else 0,
                                round_timeout=args.round_timeout, producer=producer)
            summary.campaigns.append(campaign.result)
            running = (campaign, campaign.result)
            left = args.rounds - _verified_rounds(summary)
            rounds = min(args.rounds_per_campaign, max(1, left))
            campaign.plan(rounds, TASK_EXIT_OPTIONAL)
            nodes = len(kafka.cluster.node_infos)
            # A regular step on the 3-node cluster: one rolling restart per campaign.
            rolling_at = rng.randrange(rounds) if nodes == 3 else -1
            try:
                campaign.start()
                for i in range(rounds):
                    if i == rolling_at:
                        crash = Crash("rolling", how=OUTAGE_WAYS[rolling_steps % len(OUTAGE_WAYS)])
                        rolling_steps += 1
                    else:
                        crash = choose_crash(rng, campaign, nodes)
                    campaign.round(crash)
                campaign.finish()
                campaign.close()
                if campaign.result.ok and not args.keep:
                    shutil.rmtree(workdir, ignore_errors=True)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - a finding
                # Recorded in the campaign itself, so its verdict fails and its JSON says why.
                campaign.close()
                campaign.result.errors.append(f"{type(e).__name__}: {e}"[:4000])
                text = f"{campaign.name}: {type(e).__name__}: {e}"
                meta["errors"].append(text[:4000])
                print(text, file=sys.stderr, flush=True)
                traceback.print_exc()
            failed = failed or not campaign.result.ok
            running = None
            save()
            print(summary.text(), file=sys.stderr, flush=True)
    finally:
        if running is not None:
            # Cut short (Ctrl-C ends the sitting): its pipeline was never verified, so it is
            # dropped whole rather than recorded as a failed campaign.
            running[0].close()
            summary.campaigns.remove(running[1])
        save()
        if not args.keep:
            clusters.stop()
    print(summary.text())
    return 1 if failed or not summary.totals()["all_ok"] else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=200,
                   help="verified crash rounds in total (a failed campaign's rounds do not count)")
    p.add_argument("--rounds-per-campaign", type=int, default=10)
    p.add_argument("--out", default="docs/soak-results.json", help="JSON summary path")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--workdir", help="where clusters, checkpoints and logs go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep clusters and every campaign's logs")
    p.add_argument("--round-timeout", type=float, default=300.0)
    p.add_argument("--producer", choices=["librdkafka", "txkafka", "both"], default="both",
                   help="the sink's producer option in every campaign; both (the default): "
                        "alternating by campaign number (the crash draws do not depend on it)")
    p.add_argument("--max-hours", type=float, default=0.0, help="stop starting campaigns after")
    p.add_argument("--resume", action="store_true",
                   help="keep the campaigns already in --out (same seed) and add rounds until "
                        "--rounds in total: a soak can run in several sittings")
    return run_soak(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
