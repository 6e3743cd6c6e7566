"""ui.labels: stop labels merged and stacked so that no two overlap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as hs

from gapwatch.ui import labels
from gapwatch.ui.labels import Stop

RULES = ["score_collapse", "length_runaway", "post_tool_tail_growth", "ess_collapse"]


def test_same_rule_nearby_shares_one_label() -> None:
    stops = [Stop("a", 6, "score_collapse"), Stop("b", 7, "score_collapse"),
             Stop("c", 7, "length_runaway")]  # fmt: skip
    placed = labels.layout(stops, x_max=20, width_px=420)
    by_text = {lab.text: lab for lab in placed}
    assert set(by_text) == {"score_collapse ×2", "length_runaway"}
    assert by_text["score_collapse ×2"].runs == "a (step 6); b (step 7)"
    assert by_text["score_collapse ×2"].row != by_text["length_runaway"].row  # stacked


def test_far_apart_stops_keep_their_own_labels_in_one_row() -> None:
    stops = [Stop("a", 100, "score_collapse"), Stop("b", 900, "score_collapse")]
    placed = labels.layout(stops, x_max=1000, width_px=420)
    assert [(lab.text, lab.row) for lab in placed] == [("score_collapse", 0)] * 2


def test_a_label_near_the_left_edge_goes_right_of_its_rule() -> None:
    (lab,) = labels.layout([Stop("a", 1, "post_tool_tail_growth")], x_max=100, width_px=420)
    assert lab.side == "right" and lab.left_px > 0


@given(
    hs.lists(hs.tuples(hs.integers(1, 60), hs.sampled_from(RULES)), min_size=1, max_size=25),
    hs.integers(150, 900),
)
def test_no_two_labels_overlap(raw: list[tuple[int, str]], width: int) -> None:
    stops = [Stop(f"r{i}", step, rule) for i, (step, rule) in enumerate(raw)]
    placed = labels.layout(stops, x_max=60, width_px=width)
    # every stop is named by exactly one label
    assert sum(lab.runs.count("(step ") for lab in placed) == len(stops)
    for i, a in enumerate(placed):
        assert a.right_px - a.left_px >= labels.text_px(a.text) - 1e-9
        assert a.left_px >= -labels.LEFT_ROOM_PX
        for b in placed[i + 1 :]:
            if a.row == b.row:
                assert (
                    a.right_px + labels.GAP_PX <= b.left_px
                    or b.right_px + labels.GAP_PX <= a.left_px
                )
