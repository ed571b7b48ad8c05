"""The chaos summary counts only verified campaigns' rounds towards a soak's target."""

from integration_tests.chaos.soak import _verified_rounds
from integration_tests.chaos.summary import CampaignResult, ChaosSummary, RoundRecord


def _campaign(name: str, rounds: int, ok: bool) -> CampaignResult:
    c = CampaignResult(name, "map", 2, 3, "local")
    c.rounds = [RoundRecord(i + 1, "point:before_decision", "killed", i, i + 1, 1.0)
                for i in range(rounds)]
    c.ok = ok
    return c


def test_a_failed_campaign_is_recorded_but_its_rounds_do_not_count():
    s = ChaosSummary([_campaign("a", 10, True), _campaign("b", 6, False), _campaign("c", 4, True)],
                     title="t")
    t = s.totals()
    assert t["rounds"] == 20
    assert t["verified_rounds"] == 14 == _verified_rounds(s)
    assert t["failed_campaigns"] == ["b"]
    assert t["all_ok"] is False
    assert "rounds 20 (14 in verified campaigns)" in s.text()


def test_a_campaign_in_progress_does_not_count_until_it_verifies():
    running = _campaign("d", 3, False)  # CampaignResult.ok is False until its verification
    assert _verified_rounds(ChaosSummary([running], title="t")) == 0
    assert CampaignResult("e", "map", 2, 1, "local").ok is False
