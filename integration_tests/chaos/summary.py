"""What a set of chaos campaigns proved: rounds, crashes per point, records verified, verdicts.

The CI suite collects its campaigns here; ``pytest_terminal_summary`` (integration_tests/conftest.py)
prints the totals and writes them to results/chaos-ci-summary.json. The soak writes the same shape
to docs/soak-results.json.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

WRITER_POINTS = ("before_precommit", "after_precommit", "before_decision", "after_decision",
                 "between_endtxn", "after_sink_commit", "during_recovery")
ALL_POINTS = WRITER_POINTS + ("read_partition",)


@dataclass
class RoundRecord:
    """One round: a driver run that ended in a crash (or a query failure), and how long it took."""

    number: int
    crash: str                 # e.g. "point:after_decision", "random", "broker:2+random"
    outcome: str               # "killed at after_decision", "killed (random)", "failed: ..."
    committed_before: int      # Spark's last committed batch when the run started
    committed_after: int
    seconds: float
    stale_open: int | None = None   # transactions of the crashed run still open after recovery


@dataclass
class CampaignResult:
    name: str
    mode: str
    transaction_version: int
    brokers: int
    spark: str                                   # "local" or "standalone"
    rounds: list[RoundRecord] = field(default_factory=list)
    kills_by_point: dict[str, int] = field(default_factory=dict)
    random_kills: int = 0
    executor_kills: int = 0
    broker_bounces: int = 0
    task_crashes: int = 0                        # Python workers killed at a task-side point
    task_crashes_by_point: dict[str, int] = field(default_factory=dict)
    query_failures: list[str] = field(default_factory=list)
    stale_checks: int = 0                        # rounds whose recovery was checked for orphans
    stale_open: int = 0                          # orphans found by those checks (must be 0)
    final_open: list[str] = field(default_factory=list)  # open transactions at the end (must be [])
    records_verified: int = 0                    # input ids (map) / input records counted (aggregate)
    updates_verified: int = 0                    # output records checked
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0
    order_violations: int = 0
    open_windows: int = 0                        # aggregate: windows not closed at the end
    batches: int = 0                             # Spark's last committed batch + 1
    rerun_rounds: int = 0                        # sink batches re-written after lost transactions
    feeder: dict = field(default_factory=dict)
    seconds: float = 0.0
    verify_text: str = ""
    ok: bool = False

    @property
    def driver_kills(self) -> int:
        return sum(self.kills_by_point.values()) + self.random_kills

    @property
    def crash_points(self) -> int:
        """Every crash: driver kills (injected or random), task worker crashes, executor kills,
        broker kills."""
        return self.driver_kills + self.task_crashes + self.executor_kills + self.broker_bounces

    def to_json(self) -> dict:
        d = asdict(self)
        d["driver_kills"] = self.driver_kills
        d["crash_points"] = self.crash_points
        return d

    @classmethod
    def from_json(cls, d: dict) -> "CampaignResult":
        """Read back what to_json wrote (a resumed soak keeps its earlier campaigns)."""
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known and k != "rounds"}
        return cls(**kw, rounds=[RoundRecord(**r) for r in d.get("rounds", [])])


def _merge(counters: list[dict[str, int]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for c in counters:
        total.update(c)
    return dict(sorted(total.items()))


@dataclass
class ChaosSummary:
    campaigns: list[CampaignResult] = field(default_factory=list)
    title: str = "txkafka chaos"

    def totals(self) -> dict:
        cs = self.campaigns
        rounds = [r for c in cs for r in c.rounds]
        secs = [r.seconds for r in rounds]
        kills = _merge([c.kills_by_point for c in cs])
        task_kills = _merge([c.task_crashes_by_point for c in cs])
        return {
            "campaigns": len(cs),
            "rounds": len(rounds),
            # Rounds of campaigns that ran to their end and verified; a failed campaign's rounds
            # stay in the record but prove nothing about exactly-once.
            "verified_rounds": sum(len(c.rounds) for c in cs if c.ok),
            "failed_campaigns": [c.name for c in cs if not c.ok],
            "crash_points": sum(c.crash_points for c in cs),
            "driver_kills": sum(c.driver_kills for c in cs),
            "kills_by_point": kills,
            "random_time_kills": sum(c.random_kills for c in cs),
            "executor_kills": sum(c.executor_kills for c in cs),
            "broker_bounces": sum(c.broker_bounces for c in cs),
            "task_crashes": sum(c.task_crashes for c in cs),
            "task_crashes_by_point": task_kills,
            "query_failures": sum(len(c.query_failures) for c in cs),
            "points_not_hit": [p for p in ALL_POINTS if not kills.get(p) and not task_kills.get(p)],
            "records_verified": sum(c.records_verified for c in cs),
            "output_records_checked": sum(c.updates_verified for c in cs),
            "duplicates": sum(c.duplicates for c in cs),
            "missing": sum(c.missing for c in cs),
            "unexpected": sum(c.unexpected for c in cs),
            "order_violations": sum(c.order_violations for c in cs),
            "recovery_checks": sum(c.stale_checks for c in cs),
            "open_transactions_after_rounds": sum(c.stale_open for c in cs),
            "open_transactions_at_end": sum(len(c.final_open) for c in cs),
            "sink_rerun_rounds": sum(c.rerun_rounds for c in cs),
            "modes": sorted({c.mode for c in cs}),
            "transaction_versions": sorted({c.transaction_version for c in cs}),
            "spark": sorted({c.spark for c in cs}),
            "seconds": round(sum(c.seconds for c in cs), 1),
            "round_seconds": {
                "mean": round(statistics.mean(secs), 1) if secs else 0,
                "median": round(statistics.median(secs), 1) if secs else 0,
                "max": round(max(secs), 1) if secs else 0,
            },
            "all_ok": bool(cs) and all(c.ok for c in cs),
        }

    def to_json(self) -> dict:
        return {"title": self.title, "totals": self.totals(),
                "campaigns": [c.to_json() for c in self.campaigns]}

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1, sort_keys=False) + "\n")
        return path

    def text(self) -> str:
        t = self.totals()
        kills = ", ".join(f"{p}={n}" for p, n in t["kills_by_point"].items()) or "none"
        if t["task_crashes_by_point"]:
            kills += "; task crashes at " + ", ".join(
                f"{p}={n}" for p, n in t["task_crashes_by_point"].items())
        lines = [
            f"{self.title}: {'ALL EXACTLY ONCE' if t['all_ok'] else 'FAILED'} "
            f"({t['campaigns']} campaigns, {t['seconds']:.0f}s)",
            f"  rounds {t['rounds']} ({t['verified_rounds']} in verified campaigns), crash points "
            f"{t['crash_points']} (driver kills "
            f"{t['driver_kills']}: injected {sum(t['kills_by_point'].values())}, random-time "
            f"{t['random_time_kills']}; executor kills {t['executor_kills']}; broker kill+restart "
            f"{t['broker_bounces']}; task crashes {t['task_crashes']})",
            f"  injection points hit: {kills}"
            + (f"; NOT hit: {', '.join(t['points_not_hit'])}" if t["points_not_hit"] else ""),
            f"  records verified {t['records_verified']} (output records checked "
            f"{t['output_records_checked']}): duplicates {t['duplicates']}, missing "
            f"{t['missing']}, unexpected {t['unexpected']}, order violations "
            f"{t['order_violations']}",
            f"  open transactions of the sink: after {t['recovery_checks']} recoveries "
            f"{t['open_transactions_after_rounds']}, at the end {t['open_transactions_at_end']}",
            f"  modes {'/'.join(t['modes'])}; transaction.version {t['transaction_versions']}; "
            f"spark {'/'.join(t['spark'])}; query failures {t['query_failures']}; sink re-run "
            f"rounds {t['sink_rerun_rounds']}",
        ]
        for c in self.campaigns:
            lines.append(
                f"  - {c.name}: {'ok' if c.ok else 'FAILED'} {c.mode} tv{c.transaction_version} "
                f"{c.brokers} broker(s) {c.spark}: {len(c.rounds)} rounds, "
                f"{c.records_verified} records, {c.batches} batches, {c.seconds:.0f}s")
        return "\n".join(lines)


# The CI suite's campaigns, printed by the terminal-summary hook in integration_tests/conftest.py.
CI_RESULTS: list[CampaignResult] = []
CI_SUMMARY_PATH = Path(__file__).resolve().parents[2] / "results" / "chaos-ci-summary.json"


def terminal_summary(terminalreporter) -> None:
    """Print the chaos campaigns of this pytest run (if any) and write them to a JSON file."""
    if not CI_RESULTS:
        return
    summary = ChaosSummary(list(CI_RESULTS), title="txkafka chaos (CI)")
    path = summary.write(CI_SUMMARY_PATH)
    terminalreporter.write_sep("=", "txkafka chaos summary")
    for line in summary.text().splitlines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"  (JSON: {path})")
