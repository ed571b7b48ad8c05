"""What a set of chaos campaigns proved: rounds, crashes per point, records verified, verdicts.

The CI suite collects its campaigns here; ``pytest_terminal_summary`` (integration_tests/conftest.py)
prints the totals and writes them to results/chaos-ci-summary.json. The soak writes the same shape
to docs/soak-results.json.

Verdicts are derived from the evidence every time they are read (never stored by hand): a campaign
is ok only if it ran the rounds it planned, every crash target it asked for landed (unless it
declared the target optional, with a reason), its output was verified with records in it and
nothing wrong, no transaction was left open, and no query failed unexpectedly. A set of campaigns
is ok only if it has one, every campaign is ok, and it meets its ``Coverage``.
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

# Crash targets, what a round asks for and what landed:
#   "kill:P"       the driver SIGKILLed at injection point P (its marker written, exit -9)
#   "task-exit:P"  a task's Python worker exited at task-side point P (its marker written)
#   "random"       the driver SIGKILLed by the campaign while it was running
#   "executor"     the executor JVM running the task that sat in pre-commit SIGKILLed
#   "broker"       a broker node that was up SIGKILLed, and up again afterwards
#   "broker:WAY"   a rolling restart took a broker down that way (sigterm, sigkill, sigstop)
#                  under the running query, and it was back (campaign.py, ``rolling``)
#   "op:STEP"      an operator action showed the outcome it must show (OPERATOR_STEPS)
DESIGNED_FAILURE = "so none is"  # the sink's deliberate failure of an uncommittable batch


# Operator actions (campaign.py) and the outcome each must show, with its evidence:
OPERATOR_STEPS = {
    # the next run has another task layout and no redo is pending: it commits a batch with it
    "relayout": "a batch decided with the new layout's task partitions",
    # the same while a lost round waits to be re-written: the run fails with
    # TaskLayoutChangedError and commits nothing of the re-run
    "relayout-refused": "TaskLayoutChangedError, the lost round still waiting",
    # ... then the layout that decided the lost round re-writes it as the batch's next round
    "layout-restored": "the lost batch complete, its new round with the lost round's layout",
    # newest offsets/N and commits/N removed, the re-planned batch reads the same offsets
    "rollback-skipped": "the sink's skip logged, commits/N written again",
    # ... reads other offsets: the run fails with CheckpointMismatchError before writing
    "rollback-refused": "CheckpointMismatchError naming the batch, nothing of it written",
    # ... then the removed files restored: the next run continues after them
    "rollback-restored": "a batch committed after the restored ones",
    # the stopped or killed query moved to a new checkpoint by a savepoint: a changed query
    # started at the savepoint's positions and committed a batch
    "savepoint-moved": "the new query's batch 0 starts at the savepoint, a batch committed",
}
# Query failures an operator step provokes on purpose, by the error that must name them.
STEP_ERRORS = {"relayout-refused": "TaskLayoutChangedError",
               "rollback-refused": "CheckpointMismatchError"}


def is_designed_failure(reason: str) -> bool:
    """The sink failed a batch on purpose (invariant 7: a transaction too close to its timeout to
    be committed; all aborted, no decision): a correct outcome, not a bug."""
    return DESIGNED_FAILURE in reason


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
    asked: list[str] = field(default_factory=list)   # crash targets the round asked for
    landed: list[str] = field(default_factory=list)  # ... and those it proved happened
    # Operator steps: the outcomes this round accepts (OPERATOR_STEPS keys) and the one its
    # evidence showed ("" when none did); the verdict requires observed in expected.
    expected: list[str] = field(default_factory=list)
    observed: str = ""


@dataclass
class CampaignResult:
    name: str
    mode: str
    transaction_version: int
    brokers: int
    spark: str                                   # "local" or "standalone"
    producer: str = "librdkafka"                 # the sink's producer option
    rounds_planned: int = 0                      # rounds the campaign set out to run
    optional: dict[str, str] = field(default_factory=dict)  # crash target -> why it may miss
    rounds: list[RoundRecord] = field(default_factory=list)
    kills_by_point: dict[str, int] = field(default_factory=dict)
    random_kills: int = 0
    executor_kills: int = 0
    broker_bounces: int = 0                      # broker outages of every kind
    broker_outages: dict[str, int] = field(default_factory=dict)  # rolling restarts: by way
    task_crashes: int = 0                        # Python workers killed at a task-side point
    task_crashes_by_point: dict[str, int] = field(default_factory=dict)
    operator_steps: dict[str, int] = field(default_factory=dict)  # outcomes shown, with evidence
    checkpoints: int = 1                         # checkpoints the pipeline ran on (savepoints)
    order_note: str = ""                         # why the map's order check was off ("": on)
    query_failures: list[str] = field(default_factory=list)
    expected_failures: list[str] = field(default_factory=list)  # provoked on purpose, verbatim
    errors: list[str] = field(default_factory=list)  # exceptions that cut the campaign short
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

    @property
    def driver_kills(self) -> int:
        return sum(self.kills_by_point.values()) + self.random_kills

    @property
    def crash_points(self) -> int:
        """Every crash: driver kills (injected or random), task worker crashes, executor kills,
        broker kills."""
        return self.driver_kills + self.task_crashes + self.executor_kills + self.broker_bounces

    @property
    def asked(self) -> set[str]:
        """Every crash target a round asked for."""
        return {t for r in self.rounds for t in r.asked}

    def landed(self) -> set[str]:
        """Every crash target with evidence that it happened."""
        out = {f"kill:{p}" for p, n in self.kills_by_point.items() if n}
        out |= {f"task-exit:{p}" for p, n in self.task_crashes_by_point.items() if n}
        for target, n in (("random", self.random_kills), ("executor", self.executor_kills),
                          ("broker", self.broker_bounces)):
            if n:
                out.add(target)
        out |= {f"op:{step}" for step, n in self.operator_steps.items() if n}
        out |= {f"broker:{way}" for way, n in self.broker_outages.items() if n}
        return out

    def unexpected_failures(self) -> list[str]:
        """Query failures that are neither the sink's designed failure nor provoked on purpose."""
        return [f for f in self.query_failures
                if not is_designed_failure(f) and f not in self.expected_failures]

    def problems(self) -> list[str]:
        """Why this campaign proves nothing or found a fault; empty when it is ok."""
        out = [f"error: {e}" for e in self.errors]
        if self.rounds_planned < 1:
            out.append("no round planned: a campaign must crash something")
        elif len(self.rounds) < self.rounds_planned:
            out.append(f"ran {len(self.rounds)} of {self.rounds_planned} planned rounds")
        missed = sorted(self.asked - self.landed() - set(self.optional))
        if missed:
            out.append(f"asked for but never landed: {', '.join(missed)}")
        for r in self.rounds:
            if r.expected and r.observed not in r.expected:
                out.append(f"round {r.number} ({r.crash}): expected "
                           f"{' or '.join(r.expected)}, observed {r.observed or 'nothing'}: "
                           f"{r.outcome[:300]}")
        if self.records_verified <= 0 or self.updates_verified <= 0:
            out.append(f"nothing verified: {self.records_verified} input records, "
                       f"{self.updates_verified} output records checked")
        if self.duplicates or self.missing or self.unexpected or self.order_violations:
            out.append(f"output not exactly once: duplicates {self.duplicates}, missing "
                       f"{self.missing}, unexpected {self.unexpected}, order violations "
                       f"{self.order_violations}")
        if self.mode == "aggregate" and self.open_windows > 1:
            # Only the feeder's far-ahead flush record may be in a window still open at the end.
            out.append(f"{self.open_windows} windows still open at the end (at most 1 may be)")
        feeder = self.feeder
        if self.mode == "map" and feeder.get("transactions_failed") == 0 and \
                feeder.get("records_committed") != self.records_verified:
            out.append(f"the feeder committed {feeder.get('records_committed')} records, "
                       f"read_committed found {self.records_verified} in the input")
        if self.final_open:
            out.append(f"transactions of the sink open at the end: {self.final_open[:5]}")
        unchecked = [r.number for r in self.rounds if r.stale_open is None]
        if unchecked:
            out.append(f"recovery never checked after rounds {unchecked}")
        if self.stale_open or any(r.stale_open for r in self.rounds):
            out.append(f"{self.stale_open} transactions of crashed runs still open after recovery")
        failures = self.unexpected_failures()
        if failures:
            out.append(f"the query failed instead of recovering: {failures[:3]}")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems()

    def to_json(self) -> dict:
        d = asdict(self)
        d["driver_kills"] = self.driver_kills
        d["crash_points"] = self.crash_points
        d["ok"] = self.ok
        d["problems"] = self.problems()
        return d

    @classmethod
    def from_json(cls, d: dict) -> "CampaignResult":
        """Read back what to_json wrote (a resumed soak keeps its earlier campaigns); the verdict
        is derived again from the evidence, never taken from the file."""
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known and k != "rounds"}
        return cls(**kw, rounds=[RoundRecord(**r) for r in d.get("rounds", [])])


@dataclass(frozen=True)
class Coverage:
    """What a set of campaigns must have exercised together, on top of each campaign's verdict."""

    min_crash_points: int = 0
    points: tuple[str, ...] = ()               # each hit: a driver kill or a task crash there
    driver_kill_points: tuple[str, ...] = ()   # each killed the driver itself
    modes: tuple[str, ...] = ()
    transaction_versions: tuple[int, ...] = ()
    spark: tuple[str, ...] = ()
    min_executor_kills: int = 0
    min_broker_bounces: int = 0
    operator_steps: tuple[str, ...] = ()       # each shown at least once

    def problems(self, t: dict) -> list[str]:
        out = []
        not_shown = [s for s in self.operator_steps if not t["operator_steps"].get(s)]
        if not_shown:
            out.append(f"operator steps never shown: {', '.join(not_shown)}")
        if t["crash_points"] < self.min_crash_points:
            out.append(f"{t['crash_points']} crash points, fewer than {self.min_crash_points}")
        hit = set(t["kills_by_point"]) | set(t["task_crashes_by_point"])
        not_hit = [p for p in self.points if p not in hit]
        if not_hit:
            out.append(f"injection points not hit: {', '.join(not_hit)}")
        not_killed = [p for p in self.driver_kill_points if p not in t["kills_by_point"]]
        if not_killed:
            out.append(f"the driver was never killed at: {', '.join(not_killed)}")
        for name, want in (("modes", self.modes), ("transaction_versions",
                                                   self.transaction_versions),
                           ("spark", self.spark)):
            lacking = [w for w in want if w not in t[name]]
            if lacking:
                out.append(f"no campaign with {name} {lacking}")
        if t["executor_kills"] < self.min_executor_kills:
            out.append(f"{t['executor_kills']} executor kills, fewer than "
                       f"{self.min_executor_kills}")
        if t["broker_bounces"] < self.min_broker_bounces:
            out.append(f"{t['broker_bounces']} broker bounces, fewer than "
                       f"{self.min_broker_bounces}")
        return out


# What the CI suite's campaigns must prove together.
CI_COVERAGE = Coverage(min_crash_points=10, points=ALL_POINTS, driver_kill_points=WRITER_POINTS,
                       modes=("aggregate", "map"), transaction_versions=(0, 2),
                       spark=("standalone",), min_executor_kills=1, min_broker_bounces=1,
                       operator_steps=tuple(OPERATOR_STEPS))


def _merge(counters: list[dict[str, int]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for c in counters:
        total.update(c)
    return dict(sorted(total.items()))


@dataclass
class ChaosSummary:
    campaigns: list[CampaignResult] = field(default_factory=list)
    title: str = "txkafka chaos"
    coverage: Coverage = Coverage()

    def totals(self) -> dict:
        cs = self.campaigns
        problems = {c.name: c.problems() for c in cs}
        rounds = [r for c in cs for r in c.rounds]
        secs = [r.seconds for r in rounds]
        kills = _merge([c.kills_by_point for c in cs])
        task_kills = _merge([c.task_crashes_by_point for c in cs])
        out = {
            "campaigns": len(cs),
            "rounds": len(rounds),
            # Rounds of campaigns that ran to their end and verified; a failed campaign's rounds
            # stay in the record but prove nothing about exactly-once.
            "verified_rounds": sum(len(c.rounds) for c in cs if not problems[c.name]),
            "failed_campaigns": [name for name, p in problems.items() if p],
            "campaign_problems": {name: p for name, p in problems.items() if p},
            "crash_points": sum(c.crash_points for c in cs),
            "driver_kills": sum(c.driver_kills for c in cs),
            "kills_by_point": kills,
            "random_time_kills": sum(c.random_kills for c in cs),
            "executor_kills": sum(c.executor_kills for c in cs),
            "broker_bounces": sum(c.broker_bounces for c in cs),
            "task_crashes": sum(c.task_crashes for c in cs),
            "task_crashes_by_point": task_kills,
            "operator_steps": _merge([c.operator_steps for c in cs]),
            "broker_outages": _merge([c.broker_outages for c in cs]),
            "query_failures": sum(len(c.query_failures) for c in cs),
            # Failures that are neither the sink's designed one nor provoked on purpose: each
            # fails its campaign (a broker outage must never stop the query).
            "unexpected_query_failures": sum(len(c.unexpected_failures()) for c in cs),
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
        }
        out["coverage_problems"] = self.coverage.problems(out)
        out["all_ok"] = bool(cs) and not out["failed_campaigns"] and not out["coverage_problems"]
        return out

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
            f"{t['random_time_kills']}; executor kills {t['executor_kills']}; broker outages "
            f"{t['broker_bounces']}"
            + (" (rolling restarts: " + ", ".join(f"{w}={n}" for w, n in
                                                  t["broker_outages"].items()) + ")"
               if t["broker_outages"] else "")
            + f"; task crashes {t['task_crashes']})",
            f"  injection points hit: {kills}"
            + (f"; NOT hit: {', '.join(t['points_not_hit'])}" if t["points_not_hit"] else ""),
            f"  records verified {t['records_verified']} (output records checked "
            f"{t['output_records_checked']}): duplicates {t['duplicates']}, missing "
            f"{t['missing']}, unexpected {t['unexpected']}, order violations "
            f"{t['order_violations']}",
            f"  open transactions of the sink: after {t['recovery_checks']} recoveries "
            f"{t['open_transactions_after_rounds']}, at the end {t['open_transactions_at_end']}",
            f"  operator steps: "
            + (", ".join(f"{k}={n}" for k, n in t["operator_steps"].items()) or "none"),
            f"  modes {'/'.join(t['modes'])}; transaction.version {t['transaction_versions']}; "
            f"spark {'/'.join(t['spark'])}; query failures {t['query_failures']} "
            f"({t['unexpected_query_failures']} unexpected); sink re-run "
            f"rounds {t['sink_rerun_rounds']}",
        ]
        if not self.campaigns:
            lines.append("  no campaign ran: nothing was proved")
        lines += [f"  coverage not met: {p}" for p in t["coverage_problems"]]
        for c in self.campaigns:
            lines.append(
                f"  - {c.name}: {'ok' if c.ok else 'FAILED'} {c.mode} tv{c.transaction_version} "
                f"{c.brokers} broker(s) {c.spark} producer={c.producer}: {len(c.rounds)} "
                f"rounds, "
                f"{c.records_verified} records, {c.batches} batches, {c.seconds:.0f}s")
            lines += [f"      {p}" for p in t["campaign_problems"].get(c.name, [])]
        return "\n".join(lines)


# The CI suite's campaigns, printed by the terminal-summary hook in integration_tests/conftest.py.
CI_RESULTS: list[CampaignResult] = []
CI_SUMMARY_PATH = Path(__file__).resolve().parents[2] / "results" / "chaos-ci-summary.json"


def terminal_summary(terminalreporter) -> None:
    """Print the chaos campaigns of this pytest run (if any) and write them to a JSON file."""
    if not CI_RESULTS:
        return
    summary = ChaosSummary(list(CI_RESULTS), title="txkafka chaos (CI)", coverage=CI_COVERAGE)
    path = summary.write(CI_SUMMARY_PATH)
    terminalreporter.write_sep("=", "txkafka chaos summary")
    for line in summary.text().splitlines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"  (JSON: {path})")
