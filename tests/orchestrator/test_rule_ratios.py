"""The tail and ESS rules read the ratio family their ``ratio:`` setting names: the
trainer-vs-sampler mismatch (default), the policy against the frozen reference
(``ref_drift``) or the PPO ratio over the update (``ppo``); a bad name is one line."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from gapwatch.correction import names as N
from gapwatch.orchestrator import rules
from gapwatch.orchestrator.sweep.config import load_sweep_config

from .histories import Row, healthy
from .test_config import GOOD, _cli_error, _write


def with_family(hist: list[Row], ratio: N.Ratio, post: Any, text: Any, ess: Any) -> list[Row]:
    """``hist`` plus the family's post-tool/text p95 and post-tool ESS (functions of step)."""
    return [
        {
            **r,
            N.tail("post_tool", "p95", ratio): post(r["step"]),
            N.tail("text", "p95", ratio): text(r["step"]),
            N.ess("post_tool", ratio): ess(r["step"]),
        }
        for r in hist
    ]


def fired(rule: rules.Rule, hist: list[Row]) -> rules.Decision | None:
    w = rules.RuleSet([rule]).watch()
    for row in hist:
        for d in w.step(row):
            if d.action != "continue":
                return d
    return None


def drifting(ratio: N.Ratio) -> list[Row]:
    """A run healthy in every mismatch figure whose ``ratio`` family's post-tool tail
    grows from step 10 (text flat) and whose post-tool ESS falls to 0.02 there."""
    grow = lambda s: 0.1 * (1.5 ** max(0, s - 9))  # noqa: E731
    return with_family(healthy(random.Random(3)), ratio, grow, lambda s: 0.1,
                       lambda s: 0.9 if s < 10 else 0.02)  # fmt: skip


@pytest.mark.parametrize("ratio", ["ref_drift", "ppo"])
def test_rules_read_the_family_they_are_set_to_and_only_it(ratio: N.Ratio) -> None:
    hist = drifting(ratio)
    tail = fired(rules.get("post_tool_tail_growth", ratio=ratio), hist)
    assert tail is not None and tail.action == "warn" and 12 <= tail.step <= 16
    assert tail.evidence["ratio"] == ratio and float(tail.evidence["post_tool_growth"]) >= 3
    ess = fired(rules.get("ess_collapse", ratio=ratio), hist)
    assert ess is not None and ess.step == 11
    assert ess.evidence["metric"] == N.ess("post_tool", ratio)
    # the default (mismatch) rules see a healthy run; the other family sees nothing
    other: N.Ratio = "ppo" if ratio == "ref_drift" else "ref_drift"
    for name in ("post_tool_tail_growth", "ess_collapse"):
        assert fired(rules.get(name), hist) is None
        assert fired(rules.get(name, ratio=other), hist) is None


def test_a_drift_rule_names_its_own_figures_when_a_log_lacks_them() -> None:
    rs = rules.build(
        {"ess_collapse": {"ratio": "ppo"}, "post_tool_tail_growth": {"ratio": "ref_drift"}}
    )
    have = set(healthy(random.Random(0))[0])
    why = rs.unfed(have, None)
    assert why["ess_collapse"] == f"log lacks {N.ess('post_tool', 'ppo')}"
    assert N.tail("post_tool", "p95", "ref_drift") in why["post_tool_tail_growth"]
    # the mismatch ESS falls back to verl's whole-batch ESS; a drift family has no fallback
    assert rules.get("ess_collapse").can_feed({N.IS_ESS})
    assert not rules.get("ess_collapse", ratio="ref_drift").can_feed({N.IS_ESS})


@pytest.mark.parametrize("name", ["post_tool_tail_growth", "ess_collapse"])
@pytest.mark.parametrize("bad", ["kl", "", 3, None])
def test_a_bad_ratio_is_one_clear_line(name: str, bad: Any) -> None:
    with pytest.raises(ValueError) as exc:
        rules.get(name, ratio=bad)
    msg = str(exc.value)
    assert "\n" not in msg and f"rule {name!r}: ratio: unknown ratio" in msg
    assert "valid: mismatch, ref_drift, ppo" in msg


def test_a_bad_ratio_in_a_sweep_config_is_one_line(tmp_path: Path) -> None:
    doc = {**GOOD, "rules": {"ess_collapse": {"ratio": "drift"}}}
    db = f"sqlite:///{tmp_path}/x.db"
    line = _cli_error(["sweep", str(_write(tmp_path, doc)), "--db", db])
    assert "unknown ratio 'drift'; valid: mismatch, ref_drift, ppo" in line
    ok = {**GOOD, "rules": {"ess_collapse": {"ratio": "ref_drift"}}}
    assert load_sweep_config(_write(tmp_path, ok)).config.rules is not None
