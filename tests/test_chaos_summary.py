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


def test_a_campaign_cut_short_by_the_end_of_a_sitting_is_dropped_whole(tmp_path, monkeypatch):
    """Ctrl-C during a campaign ends the sitting: the campaigns verified before it stay in the
    JSON, the interrupted one (never verified) is not recorded, so --resume can go on."""
    import json
    from types import SimpleNamespace

    import pytest

    from integration_tests.chaos import soak

    class FakeClusters:
        def __init__(self, root):
            self.spark = None

        def start(self):
            pass

        def kafka(self, name):
            return SimpleNamespace(cluster=SimpleNamespace(node_infos=[1, 2, 3]))

        def stop(self):
            pass

    made = []

    class FakeCampaign:
        def __init__(self, name, kafka, mode, workdir, **kw):
            self.name = name
            self.result = CampaignResult(name, mode, kw["transaction_version"], 3, "local")
            self.closed = False
            made.append(self)

        def start(self):
            pass

        def round(self, crash):
            if len(made) == 2:
                raise KeyboardInterrupt
            self.result.rounds.append(RoundRecord(1, "random", "killed", 0, 1, 1.0))

        def finish(self):
            self.result.ok = True

        def close(self):
            self.closed = True

    monkeypatch.setattr(soak, "Clusters", FakeClusters)
    monkeypatch.setattr(soak, "Campaign", FakeCampaign)
    monkeypatch.setattr(soak, "choose_crash", lambda rng, campaign, nodes: None)
    out = tmp_path / "soak.json"
    with pytest.raises(KeyboardInterrupt):
        soak.main(["--rounds", "5", "--rounds-per-campaign", "1", "--out", str(out),
                   "--workdir", str(tmp_path / "w"), "--seed", "7"])
    data = json.loads(out.read_text())
    assert [c["name"] for c in data["campaigns"]] == [made[0].name]
    assert data["totals"]["all_ok"] is True and data["totals"]["failed_campaigns"] == []
    assert made[1].closed  # its drivers and feeder do not outlive the sitting
