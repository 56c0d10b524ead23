"""The learning check in words: what it flags leads a run's text and status (keeping the status's
head, which the page reads), its note gives the rule and every flagged setting, and a run that
learned keeps its words as they were."""

from pathlib import Path

from blocklab.analysis.learned import Chance, Check
from blocklab.reports import Report, Status
from blocklab.reports.html import status_kind
from blocklab.reports.learned import clauses, flagged, note

CHANCE = Chance(0.01, True)


def check(variant, score, unmoved=0, chance=CHANCE):
    """A setting of 3 trials as `analysis.learned.checks` reads it."""
    gain, at = chance.gain(score), chance.holds(score)
    return Check({"variant": variant}, 3, score, chance, gain, at, unmoved, 3)


def name(group):
    return group["variant"]


def report(line="FINDINGS: 3 findings: 3 agrees"):
    return Report(Path("report.md"), {"findings": []}, ["first line"], Status(False, line))


def test_settings_at_chance_lead_the_text_and_the_status():
    found = [check("pure", 0.012), check("skip", 0.011), check("all", 0.6, unmoved=1)]
    said = flagged(report(), found, name)
    line = said.status.line
    assert line.startswith("FINDINGS: AT CHANCE after training in 2 of 3 settings: pure, skip ")
    assert "(test accuracy 0.011-0.012; a constant guess scores 0.01)" in line
    assert "LOSS NEVER MOVED in 1 of 9 trials: all" in line
    assert line.endswith("; 3 findings: 3 agrees")
    assert status_kind(said.status.as_json()) == "findings"  # the page's banner kind is kept
    assert said.text[0].startswith("AT CHANCE") and said.text[-1] == "first line"
    assert [c["at_chance"] for c in said.json["learning"]] == [True, True, False]
    assert said.json["learning"][0]["chance"] == 0.01


def test_a_run_that_learned_keeps_its_words():
    said = flagged(report(), [check("pure", 0.6), check("skip", 0.9)], name)
    assert said.status.line == "FINDINGS: 3 findings: 3 agrees" and said.text == ["first line"]
    assert len(said.json["learning"]) == 2
    assert note([check("pure", 0.6)], name).endswith(
        "No setting is at chance and every loss moved."
    )
    assert note([], name).endswith("No trained setting to check.")


def test_the_note_names_every_flagged_setting_and_the_clause_the_first_few():
    found = [check(f"v{i}", 0.01) for i in range(6)] + [check("mse", 0.99, chance=Chance(1, False))]
    (said,) = clauses(found, name)
    assert "in 7 of 7 settings: v0, v1, v2, v3 and 3 more (test score" in said
    written = note(found, name)
    assert all(f"v{i}: 0.01 (chance 0.01, 0.0% of the way" in written for i in range(6))
    assert "mse: 0.99 (chance 1, 1.0% of the way to perfect)" in written
    below = note([check("under", 0.005)], name)
    assert "At chance: under: 0.005 (chance 0.01, below chance)." in below
