"""Every page rendered by Streamlit's AppTest over a real SQLite store (see conftest.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from gapwatch import ui
from gapwatch.ui import data, source
from gapwatch.ui.source import ENV_URL
from gapwatch.ui.sweep_model import SPREAD_TITLE
from gapwatch.ui.views.compare import ECDF_TITLE, ECDF_TITLES, FIGURES, TURN_TITLE

STEPS = 12  # as tests/ui/conftest.py writes
Filled = Any


APP = str(Path(ui.__file__).with_name("app.py"))


def render(
    monkeypatch: pytest.MonkeyPatch, url: str, view: str | None = None, **params: Any
) -> AppTest:
    monkeypatch.setenv(ENV_URL, url)
    at = AppTest.from_file(APP, default_timeout=30)
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    if view:
        at.switch_page(view)
        for k, v in params.items():
            at.query_params[k] = str(v)
        at.run()
    return at


_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


def shown(markdown: str) -> str:
    """What a markdown string shows: its backslash escapes read as their characters, the
    invisible word joiners (nav.plain's auto-link breaks) dropped."""
    return _ESCAPED.sub(r"\1", markdown).replace("\u2060", "")


def texts(at: AppTest) -> str:
    """All text the page shows: markdown, captions, alerts, titles, expander labels, with
    markdown's backslash escapes read as the characters they show (``ui.nav.plain``)."""
    parts: list[str] = []
    for kind in ("markdown", "caption", "error", "warning", "info", "title", "subheader"):
        parts += [str(e.value) for e in getattr(at, kind)]
    parts += [str(e.label) for e in at.expander]
    return shown("\n".join(parts))


def frames_text(at: AppTest) -> str:
    return "\n".join(df.value.to_string() for df in at.dataframe)


def charts(at: AppTest) -> int:
    return len(at.get("vega_lite_chart"))


def specs(at: AppTest) -> list[dict[str, Any]]:
    return [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]


def view_titles(at: AppTest) -> list[str]:
    """The titles of every view of every chart (a page's chart concatenates views)."""
    out = []
    for spec in specs(at):
        views = [v for row in spec.get("vconcat", [{"hconcat": [spec]}]) for v in row["hconcat"]]
        out += [v["title"]["text"] if isinstance(v.get("title"), dict) else v.get("title")
                for v in views]  # fmt: skip
    return out


def chart_data(at: AppTest) -> str:
    """Every chart's spec plus the text of every dataset behind it (Arrow-decoded)."""
    out = []
    for c in at.get("vega_lite_chart"):
        out.append(str(c.proto.spec))
        for d in c.proto.datasets:
            out.append(pa.ipc.open_stream(d.data.data).read_all().to_pandas().to_string())
    return "\n".join(out)


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert "this page failed" not in texts(at), texts(at)


def test_sweeps_page_lists_the_sweep_with_counts(
    monkeypatch: pytest.MonkeyPatch, filled: Filled
) -> None:
    at = render(monkeypatch, filled.url)
    no_exception(at)
    table = at.dataframe[0].value.set_index("name")
    assert table.loc["ui-test", "runs"] == 6
    assert table.loc["ui-test", "stopped"] == 1 and table.loc["ui-test", "failed"] == 1
    assert table.loc["ui-test", "completed"] == 4


def test_sweep_page_runs_leaderboard_decisions(
    monkeypatch: pytest.MonkeyPatch, filled: Filled
) -> None:
    at = render(monkeypatch, filled.url, "views/sweep.py", sweep=filled.sweep_id)
    no_exception(at)
    runs = at.dataframe[0].value
    assert set(runs["id"]) == set(filled.ids.values())
    stopped = runs.set_index("id").loc[filled.ids["t1_none"]]
    assert stopped["stop rule"] == "score_collapse" and stopped["stop step"] == 6
    assert stopped["budget"] == STEPS
    board = at.dataframe[1].value.set_index("strategy")
    assert board.index[0] == "dense control"
    assert board.loc["q2 + none", "collapsed"] == "1/1"
    assert board.loc["q2 + icepop", "collapsed"] == "1/1"
    assert board.loc["q2 + none", "gap vs control"] == pytest.approx(50.0, rel=1e-6)
    saved = {m.label: m.value for m in at.metric}
    assert saved["steps saved by early stopping"] == str(STEPS - 6)
    assert "worker died at step 3" in texts(at)
    decisions = at.dataframe[2].value
    assert set(decisions["rule"]) == {"gap_vs_control", "score_collapse"}


def test_sweep_page_filters_and_sort_restore_from_url(
    monkeypatch: pytest.MonkeyPatch, filled: Filled
) -> None:
    at = render(
        monkeypatch, filled.url, "views/sweep.py",
        sweep=filled.sweep_id, status="completed", sort="last score", desc="1",
    )  # fmt: skip
    no_exception(at)
    runs = at.dataframe[0].value
    assert set(runs["status"]) == {"completed"} and len(runs) == 4
    scores = [s for s in runs["last score"] if s == s]
    assert scores == sorted(scores, reverse=True)
    assert at.multiselect(key="f_status").value == ["completed"]
    # a widget change goes back into the URL
    at.multiselect(key="f_status").set_value(["stopped"]).run()
    assert at.query_params["status"] in ("stopped", ["stopped"])
    assert list(at.dataframe[0].value["id"]) == [filled.ids["t1_none"]]


def test_compare_pair_draws_every_figure_and_ecdfs(
    monkeypatch: pytest.MonkeyPatch, filled: Filled
) -> None:
    pair = f"{filled.ids['t1_none']},{filled.ids['c1']}"
    at = render(monkeypatch, filled.url, "views/compare.py", runs=pair)
    no_exception(at)
    assert at.multiselect(key="pick_runs").value == [filled.ids["t1_none"], filled.ids["c1"]]
    # one chart: every figure, the gap by turn, one ECDF view per ratio family and slice
    assert charts(at) == 1
    assert view_titles(at) == [f.title for f in FIGURES] + [TURN_TITLE] + [
        ECDF_TITLES[r].format(s) for r in ECDF_TITLES for s in ("text", "post_tool")
    ]
    assert ECDF_TITLES["mismatch"] == ECDF_TITLE
    drift = {"p95 |log pi_theta/pi_ref|: post-tool vs text", "ESS of the PPO ratio per slice"}
    assert drift <= {f.title for f in FIGURES}
    specs = chart_data(at)
    assert "score_collapse" in specs  # the stop rule's label on the stop rule line
    assert "interaction (turn) index" in specs and "5+" in specs  # the per-turn view
    assert "budget 64" in specs and "zero" in specs
    ecdf = at.multiselect(key="ecdf_steps").value
    assert ecdf == [1, 7, 12]  # first, middle, last of the steps either run stored


def test_compare_restores_log_points_and_ecdf_steps(
    monkeypatch: pytest.MonkeyPatch, filled: Filled
) -> None:
    at = render(
        monkeypatch, filled.url, "views/compare.py",
        runs=filled.ids["c1"], log="1", points="40", ecdf="3,9",
    )  # fmt: skip
    no_exception(at)
    assert at.toggle[0].value is True
    assert at.number_input[0].value == 40
    assert at.multiselect(key="ecdf_steps").value == [3, 9]
    specs = chart_data(at)
    assert '"log"' in specs
    at.toggle[0].set_value(False).run()
    assert "log" not in at.query_params


def test_compare_flags_nan_and_inf(monkeypatch: pytest.MonkeyPatch, filled: Filled) -> None:
    at = render(monkeypatch, filled.url, "views/compare.py", runs=filled.ids["t2_tis"])
    no_exception(at)
    assert "not finite" in texts(at)
    nan_table = at.dataframe[-1].value
    assert set(nan_table["flag"]) == {"nan", "inf"}
    assert set(nan_table["steps"]) == {"4, 5"}


def test_compare_without_runs_and_with_unknown_runs(
    monkeypatch: pytest.MonkeyPatch, filled: Filled
) -> None:
    at = render(monkeypatch, filled.url, "views/compare.py")
    no_exception(at)
    assert "Pick runs above" in texts(at)
    at = render(monkeypatch, filled.url, "views/compare.py", runs="999,abc")
    no_exception(at)
    assert "runs 999" in texts(at)


def test_run_page_shows_decisions_metrics_config(
    monkeypatch: pytest.MonkeyPatch, filled: Filled
) -> None:
    at = render(monkeypatch, filled.url, "views/run.py", run=filled.ids["t1_none"], q="tail/")
    no_exception(at)
    t = texts(at)
    assert "stopped at step 6 by rule **score_collapse**" in t
    assert "step 6: stop by score_collapse" in t and "step 1: warn by gap_vs_control" in t
    metrics = at.dataframe[0].value
    assert set(metrics["metric"]) == {  # the mismatch's tails and the drift families'
        f"tail/{family}abs_log_ratio/{s}/p95"
        for family in ("", "ref_drift/", "ppo/")
        for s in ("post_tool", "text")
    }
    assert any('"lr"' in str(j.value) or "lr" in str(j.value) for j in at.json)
    assert charts(at) == 2  # score and gap charted by default


def test_failed_run_page_says_why(monkeypatch: pytest.MonkeyPatch, filled: Filled) -> None:
    at = render(monkeypatch, filled.url, "views/run.py", run=filled.ids["t2_icepop"])
    no_exception(at)
    assert "this run failed: RuntimeError: worker died at step 3" in texts(at)


def test_unknown_run_is_one_line(monkeypatch: pytest.MonkeyPatch, filled: Filled) -> None:
    at = render(monkeypatch, filled.url, "views/run.py", run=424242)
    no_exception(at)
    assert [shown(e.value) for e in at.error] == [
        "run 424242 is not in the store; pick one from the sweep page"
    ]


def test_empty_store_pages(monkeypatch: pytest.MonkeyPatch, empty_url: str) -> None:
    at = render(monkeypatch, empty_url)
    no_exception(at)
    assert "holds no sweep yet" in texts(at)
    at = render(monkeypatch, empty_url, "views/sweep.py", sweep=1)
    no_exception(at)
    assert "holds no sweep yet" in texts(at)


def test_missing_database_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, missing_url: str
) -> None:
    at = render(monkeypatch, missing_url)
    no_exception(at)
    assert len(at.error) == 1 and "no store database at" in shown(at.error[0].value)
    assert not Path(missing_url.removeprefix("sqlite:///")).exists()  # nothing created


def test_database_vanishing_under_the_page(
    monkeypatch: pytest.MonkeyPatch, filled: Filled, tmp_path: Path
) -> None:
    db = tmp_path / "copy.db"
    shutil.copy(filled.url.removeprefix("sqlite:///"), db)
    url = f"sqlite:///{db}"
    at = render(monkeypatch, url, "views/sweep.py", sweep=filled.sweep_id)
    no_exception(at)
    db.unlink()
    source.sweeps.clear()  # as the cache's TTL would expire
    at.run()
    no_exception(at)
    assert any("no store database at" in shown(e.value) for e in at.error)


def test_in_memory_url_refused() -> None:
    with pytest.raises(source.UIError, match="in-memory"):
        source.check_database("sqlite://")


def test_fill_is_repeatable(tmp_path: Path, filler: Any) -> None:
    # the fixture's writer is idempotent: filling twice keeps one sweep and six runs
    url = f"sqlite:///{tmp_path / 'twice.db'}"
    a = filler(url)
    b = filler(url)
    assert a.ids == b.ids


def test_hover_frame_has_one_column_per_line() -> None:
    import pandas as pd

    from gapwatch.ui import charts

    df = pd.DataFrame(
        {
            "step": [1, 2, 3, 1, 3],
            "value": [1.0, 2.0, 3.0, 10.0, 30.0],
            "run": ["a", "a", "a", "b", "b"],
        }
    )
    spec = charts.line_chart(df, title="t", y_title="y")
    hover = spec["datasets"]["hover"]
    assert list(hover.columns) == ["step", "a", "b"]  # the tooltip shows these names
    assert hover["b"].tolist() == [10.0, 10.0, 30.0]  # newest point at or before the step
    assert spec["layer"][1]["mark"]["tooltip"] == {"content": "data"}
    many = pd.DataFrame({"step": range(1, 1001), "value": 1.0, "run": "a"})
    assert len(charts.hover_frame(many.assign(key="k0"), 150)) == 150


def test_pages_over_postgresql(monkeypatch: pytest.MonkeyPatch, filled_pg: Filled) -> None:
    at = render(monkeypatch, filled_pg.url, "views/sweep.py", sweep=filled_pg.sweep_id)
    no_exception(at)
    runs = at.dataframe[0].value.set_index("id")
    assert runs.loc[filled_pg.ids["t1_none"], "stop rule"] == "score_collapse"
    pair = f"{filled_pg.ids['t1_none']},{filled_pg.ids['c1']}"
    at = render(monkeypatch, filled_pg.url, "views/compare.py", runs=pair)
    no_exception(at)
    assert len(view_titles(at)) == len(FIGURES) + 1 + 6  # the gap by turn, six ECDFs
    at = render(monkeypatch, filled_pg.url, "views/run.py", run=filled_pg.ids["t1_none"])
    no_exception(at)
    assert "step 6: stop by score_collapse" in texts(at)


def test_missing_postgresql_database_is_one_line(
    monkeypatch: pytest.MonkeyPatch, filled_pg: Filled
) -> None:
    url = filled_pg.url.rsplit("/", 1)[0] + "/gapwatch_no_such_db"
    at = render(monkeypatch, url)
    no_exception(at)
    assert len(at.error) == 1 and "gapwatch_no_such_db" in shown(at.error[0].value), at.error


def test_run_without_steps_renders_everywhere(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gapwatch.store import open_store

    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    st = open_store(url)
    sid = st.ensure_sweep("just-started", "x: 1")
    rid = st.ensure_run(
        sid, "t0", role="control", pair_key="p", seed=0, compression="none",
        correction="none", config={},
    )  # fmt: skip
    st.close()
    at = render(monkeypatch, url, "views/sweep.py", sweep=sid)
    no_exception(at)
    assert at.dataframe[0].value["steps used"].isna().all()
    at = render(monkeypatch, url, "views/compare.py", runs=rid)
    no_exception(at)
    assert "no stored step yet" in texts(at)
    at = render(monkeypatch, url, "views/run.py", run=rid)
    no_exception(at)
    assert "no stored metric yet" in texts(at)


def test_compare_refuses_too_many_runs_in_one_line(
    monkeypatch: pytest.MonkeyPatch, thresholds: Any
) -> None:
    ids = sorted(thresholds.ids.values())[: data.MAX_COMPARE + 1]
    wanted = ",".join(map(str, ids))
    at = render(monkeypatch, thresholds.url, "views/compare.py", runs=wanted)
    no_exception(at)
    assert [shown(e.value) for e in at.error] == [
        f"This link asks for {data.MAX_COMPARE + 1} runs; the compare page draws at most "
        f"{data.MAX_COMPARE} at once. Pick up to {data.MAX_COMPARE} below, or filter the "
        "sweep's runs table first."
    ]
    assert charts(at) == 0
    assert at.query_params["runs"] in (wanted, [wanted])  # the link is kept, not rewritten
    at = render(monkeypatch, thresholds.url, "views/compare.py", runs=",".join(map(str, ids[:-1])))
    no_exception(at)
    assert not at.error and charts(at) == 1


def test_sweep_page_spread_and_threshold_views(
    monkeypatch: pytest.MonkeyPatch, thresholds: Any
) -> None:
    at = render(monkeypatch, thresholds.url, "views/sweep.py", sweep=thresholds.sweep_id)
    no_exception(at)
    board = at.dataframe[1].value.set_index("strategy")
    tis4, ctl = board.loc["topk(keep=0.05) + tis(C=4)"], board.loc["dense control"]
    assert (tis4["score min"], tis4["score max"]) == pytest.approx((0.28, 0.40))
    assert tis4["rank"] == ctl["rank"] == 1  # overlapping ranges: not ranked apart
    assert "dense control" in tis4["overlaps with"]
    assert board.loc["topk(keep=0.05) + tis(C=1.5)", "rank"] > 1
    assert view_titles(at)[:2] == [SPREAD_TITLE, "Final score vs mean gap, one point per run"]
    choices = at.get("button_group")[0].proto.options
    options = [o.content for o in choices]
    assert options == [f"topk(keep=0.05) + {c}" for c in ("icepop: lo", "k3_rs: hi", "tis: C")]
    for option, log in zip(options, (False, True, False), strict=True):
        at = render(monkeypatch, thresholds.url, "views/sweep.py", sweep=thresholds.sweep_id,
                    threshold=option)  # fmt: skip
        no_exception(at)
        group, param = option.split(": ")
        assert view_titles(at)[2:] == [
            f"{group}: steps survived vs {param}", f"{group}: final score vs {param}",
            f"{group}: runs per ending vs {param}",
        ]  # fmt: skip
        x = specs(at)[0]["vconcat"][1]["hconcat"][1]["layer"][0]["encoding"]["x"]
        assert (x["scale"].get("type") == "log") is log  # only k3_rs' hi spans decades


def test_sweep_page_without_varying_thresholds_says_so(
    monkeypatch: pytest.MonkeyPatch, filled: Filled
) -> None:
    at = render(monkeypatch, filled.url, "views/sweep.py", sweep=filled.sweep_id)
    no_exception(at)
    assert "No correction's threshold varies across this sweep's runs" in texts(at)


def test_run_page_offers_its_log_and_the_replay_command(
    monkeypatch: pytest.MonkeyPatch, filled: Filled
) -> None:
    rid, ctl = filled.ids["t1_none"], filled.ids["c1"]
    at = render(monkeypatch, filled.url, "views/run.py", run=rid)
    no_exception(at)
    buttons = at.get("download_button")
    assert [b.proto.label for b in buttons] == [
        "Download run as JSONL",
        "Download its dense control",
    ]
    assert [c.value for c in at.code] == [
        f"gapwatch replay run-{rid}.jsonl --control run-{ctl}.jsonl"
    ]
    at = render(monkeypatch, filled.url, "views/run.py", run=ctl)
    assert [c.value for c in at.code] == [f"gapwatch replay run-{ctl}.jsonl"]


def test_runs_table_pages_a_large_sweep(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gapwatch.store import open_store
    from gapwatch.store.synth import fill
    from gapwatch.ui.views.sweep import PAGE_ROWS

    url = f"sqlite:///{tmp_path / 'many.db'}"
    st = open_store(url)
    ids = fill(st, PAGE_ROWS + 50, 2, 2, sweep_name="many")
    st.close()
    at = render(monkeypatch, url, "views/sweep.py", sweep=1, sort="id", desc="1")
    no_exception(at)
    first = at.dataframe[0].value
    assert len(first) == PAGE_ROWS and first["id"].iloc[0] == max(ids)  # sorted over all runs
    at = render(monkeypatch, url, "views/sweep.py", sweep=1, sort="id", desc="1", page=2)
    no_exception(at)
    assert list(at.dataframe[0].value["id"]) == sorted(ids, reverse=True)[PAGE_ROWS:]
    at = render(monkeypatch, url, "views/sweep.py", sweep=1, page=9)
    no_exception(at)
    assert [shown(w.value) for w in at.warning] == [
        "ignoring URL parameter page=9: the table has pages 1-2"
    ]
    assert len(at.dataframe[0].value) == PAGE_ROWS


def test_url_parameters_are_parsed_strictly_and_clamped(
    monkeypatch: pytest.MonkeyPatch, filled: Filled
) -> None:
    pair = f"{filled.ids['t1_tis']},{filled.ids['c1']}"
    at = render(monkeypatch, filled.url, "views/compare.py", runs=f"{pair},²", points=99999999)
    no_exception(at)
    t = texts(at)
    assert "points=99999999 is out of range (20..20000); using 20000" in t
    assert [e.value for e in at.multiselect][0] == [filled.ids["t1_tis"], filled.ids["c1"]]
    assert charts(at) == 1
    at = render(monkeypatch, filled.url, "views/run.py", run="1e3")
    no_exception(at)
    assert "ignoring URL parameter run='1e3': not an integer" in texts(at)
    at = render(monkeypatch, filled.url, "views/sweep.py", sweep="9" * 40)
    no_exception(at)
    assert "not an integer" in texts(at)


HOSTILE = "![x](http://198.51.100.7/q.png) [phish](http://198.51.100.7/login) <b>$x$</b> :red[r]"


def test_stored_and_url_strings_render_as_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, hostile: Any
) -> None:
    url = f"sqlite:///{tmp_path}/hostile.db"
    sid, rid = hostile(url, HOSTILE)
    pages = [
        render(monkeypatch, url),
        render(monkeypatch, url, "views/sweep.py", sweep=sid, threshold=HOSTILE),
        render(monkeypatch, url, "views/run.py", run=rid),
        render(monkeypatch, url, "views/compare.py", runs=rid),
    ]
    # the sweeps list shows names in a table (plain text by construction) and links
    assert f"sweep {HOSTILE}" in list(pages[0].dataframe[0].value["name"])
    for i, at in enumerate(pages):
        no_exception(at)
        raw = "\n".join(
            str(e.value)
            for kind in ("markdown", "caption", "error", "warning", "info", "title")
            for e in getattr(at, kind)
        )
        # the strings are there, but every bracket, colon and tag escaped
        assert i == 0 or "198.51.100.7" in shown(raw)
        for syntax in ("](http", "![", "<b>", ":red[", "$x$"):
            assert syntax not in raw, (syntax, raw)
    assert f"this run failed: RuntimeError: {HOSTILE}" in texts(pages[2])


def test_run_page_counts_non_finite_values(monkeypatch: pytest.MonkeyPatch, filled: Filled) -> None:
    at = render(monkeypatch, filled.url, "views/run.py", run=filled.ids["t2_tis"])
    no_exception(at)
    t = texts(at)
    assert "4 stored values are not finite (NaN or inf):" in t
    assert "training/rollout_probs_diff_mean (2 nan)" in t
    assert "rollout_corr/abs_log_ratio_mean (2 inf)" in t
    table = at.dataframe[0].value
    assert (
        dict(zip(table["metric"], table["non-finite"], strict=True))[
            "training/rollout_probs_diff_mean"
        ]
        == 2
    )


def test_page_scripts_hold_no_bare_string_but_their_docstring() -> None:
    """Streamlit's magic draws a page script's bare module-level strings as markdown (an
    attribute docstring once showed up on the compare page)."""
    import ast

    root = Path(ui.__file__).parent
    for script in [root / "app.py", *sorted((root / "views").glob("*.py"))]:
        body = ast.parse(script.read_text()).body
        stray = [
            n.lineno for n in body[1:]
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
        ]  # fmt: skip
        assert not stray, (script.name, stray)
