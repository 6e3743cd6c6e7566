"""A real ``streamlit run`` server over the synthetic store, driven by Debian's Chromium.

Each page is opened by its URL; the test checks the run names, rule names, charts and
tables a user would see, saves a screenshot of each page under the test's tmp dir, and
makes sure the server is gone afterwards. Where a page draws something whose place
matters (every run's line, the stop labels, the spread of a strategy, the seed mean at
each threshold), the test reads the drawn marks' boxes from the SVG and checks them.
Also: ``gapwatch ui`` over a missing database prints one line and starts nothing;
``python -m tools.screenshot`` writes a PNG; a run downloaded from its page replays.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gapwatch.ui.launch import Server, running_server
from gapwatch.ui.views.compare import ECDF_TITLES, FIGURES
from tools.browser import (
    CHROMIUM,
    VIEWPORT,
    chromium,
    drawn_state,
    line_geometry,
    load,
    views,
)

PAIR_VIEWS = len(FIGURES) + 1 + 2 * len(ECDF_TITLES)
"""The compare page over runs with every figure: the figures, the gap by turn, and one ECDF
per ratio family and slice."""

# Without Chromium these skip on a developer's machine; CI sets GAPWATCH_REQUIRE_BROWSER=1
# so a missing browser fails there instead of passing unseen.
_NO_BROWSER = not os.path.exists(CHROMIUM) and not os.environ.get("GAPWATCH_REQUIRE_BROWSER")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("browser"),  # one Streamlit server and one Chromium, on one worker
    pytest.mark.skipif(_NO_BROWSER, reason=f"no Chromium at {CHROMIUM}"),
]


@pytest.fixture(scope="session")
def server(filled: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("uilog") / "streamlit.log"
    with running_server(filled.url, log_path=log) as srv:
        yield srv
    assert srv.proc.poll() is not None, "the Streamlit server outlived its test"


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    p = browser.new_page(viewport=VIEWPORT)
    yield p
    p.close()


def body_text(page: Any) -> str:
    return str(page.inner_text("[data-testid='stMain']"))


def svg_text(page: Any) -> str:
    """The text drawn inside every chart (labels, legends, axis titles)."""
    return "\n".join(page.locator("[data-testid='stVegaLiteChart'] svg").all_text_contents())


def test_sweeps_page(server: Server, page: Any, tmp_path: Path) -> None:
    load(page, server.url + "/", charts=0, tables=1)
    page.get_by_text("ui-test (completed, 6 runs)").wait_for()
    page.screenshot(path=str(tmp_path / "sweeps.png"))
    assert drawn_state(page)["errors"] == 0


def test_sweep_page(server: Server, filled: Any, page: Any, tmp_path: Path) -> None:
    load(page, f"{server.url}/sweep?sweep={filled.sweep_id}", charts=1, views=2, tables=3)
    page.get_by_text("Sweep ui-test").first.wait_for()
    text = body_text(page)
    assert "worker died at step 3" in text  # the failed run's error, said in the page
    assert "steps saved by early stopping" in text
    page.screenshot(path=str(tmp_path / "sweep.png"))
    # the grid draws on a canvas; its cells are mirrored in an accessible table
    grid = page.locator("[data-testid='stDataFrame']").first
    for name in ("#1 dense control s1", "score_collapse", "icepop"):
        grid.locator("td", has_text=name).first.wait_for(state="attached", timeout=10_000)


def test_pair_page(server: Server, filled: Any, page: Any, tmp_path: Path) -> None:
    pair = f"{filled.ids['t1_none']},{filled.ids['c1']}"
    seconds = load(page, f"{server.url}/compare?runs={pair}", charts=1, views=PAIR_VIEWS)
    text = body_text(page)
    assert "#2 q2/none s1" in text and "#1 dense control s1" in text
    joined = svg_text(page)
    assert "score_collapse" in joined  # the stop rule's label drawn on the stop line
    assert "budget 64" in joined and "zero" in joined
    assert "post_tool" in joined and "text" in joined
    page.screenshot(path=str(tmp_path / "pair.png"), full_page=True)
    assert seconds < 30


INSET_PX = 2  # a line this close to the plot's edge reads as part of the frame


@pytest.mark.parametrize("log", ["0", "1"])
def test_pair_page_draws_every_line_in_view(
    server: Server, filled: Any, page: Any, log: str, tmp_path: Path
) -> None:
    """Each figure draws one line colour per run, inside its plot area and off its edges,
    and no stop label lies over the plot. (A compressed run's gap near 0.7 on a log axis
    niced to 1 once ran along the top edge under the stop label and could not be seen.)
    """

    pair = f"{filled.ids['t1_none']},{filled.ids['c1']}"
    load(page, f"{server.url}/compare?runs={pair}&log={log}", charts=1, views=PAIR_VIEWS)
    page.screenshot(path=str(tmp_path / f"pair-log{log}.png"), full_page=True)
    charts = {c["title"]: c for c in line_geometry(page)}
    assert set(charts) >= {f.title for f in FIGURES}, sorted(charts)
    for fig in FIGURES:
        c = charts[fig.title]
        plot = c["plot"]
        assert len({ln["stroke"] for ln in c["lines"]}) == 2, (fig.title, c["lines"])
        for ln in c["lines"]:
            assert ln["top"] >= plot["top"] + INSET_PX, (fig.title, "on the top edge", ln, plot)
            assert ln["bottom"] <= plot["bottom"] - INSET_PX, (fig.title, "on the bottom", ln)
        assert [lab["text"] for lab in c["stopLabels"]] == ["score_collapse"], fig.title
        for lab in c["stopLabels"]:
            assert lab["bottom"] <= plot["top"], (fig.title, "stop label over the plot", lab)


def test_pair_page_log_scale_from_url(server: Server, filled: Any, page: Any) -> None:
    load(
        page,
        f"{server.url}/compare?runs={filled.ids['c1']}&log=1&ecdf=3,9",
        charts=1,
        views=PAIR_VIEWS,
    )
    toggle = page.locator("input[aria-label='log scale']")
    assert toggle.is_checked()
    assert "step 9" in svg_text(page)


def test_run_page(server: Server, filled: Any, page: Any, tmp_path: Path) -> None:
    load(page, f"{server.url}/run?run={filled.ids['t1_none']}", charts=2, tables=1)
    text = body_text(page)
    assert "stopped at step 6 by rule score_collapse" in text
    page.get_by_role("tab", name="decisions").click()
    page.get_by_text("step 6: stop by score_collapse").wait_for()
    page.get_by_text("below_zero_for").wait_for()  # the evidence, shown expanded
    page.screenshot(path=str(tmp_path / "run.png"), full_page=True)


def test_failed_and_nan_runs(server: Server, filled: Any, page: Any) -> None:
    load(page, f"{server.url}/run?run={filled.ids['t2_icepop']}", charts=2, tables=1)
    assert "this run failed: RuntimeError: worker died at step 3" in body_text(page)
    load(page, f"{server.url}/compare?runs={filled.ids['t2_tis']}", charts=1, views=PAIR_VIEWS)
    assert "not finite" in body_text(page)


def test_cli_refuses_missing_database(tmp_path: Path) -> None:
    missing = tmp_path / "absent.db"
    out = subprocess.run(
        [sys.executable, "-m", "gapwatch.orchestrator.cli", "ui", "--db", f"sqlite:///{missing}",
         "--port", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no store database at"), out.stderr
    assert not missing.exists()


def test_screenshot_script(filled: Any, tmp_path: Path) -> None:
    out = tmp_path / "img" / "pair.png"
    done = subprocess.run(
        [sys.executable, "-m", "tools.screenshot", "--db", filled.url, "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.stat().st_size > 20_000
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_serves_then_stops_on_sigterm(filled: Any) -> None:
    import signal
    import urllib.error
    import urllib.request

    from gapwatch.ui.launch import free_port, wait_healthy

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gapwatch.orchestrator.cli", "ui", "--db", filled.url, "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, 60)  # type: ignore[arg-type]
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, out
    assert f"serving {filled.url}" in out
    with pytest.raises(urllib.error.URLError):  # the server went with it
        urllib.request.urlopen(f"{base}/_stcore/health", timeout=2)


def test_running_sweep_page_refreshes_itself(filled: Any, browser: Any, tmp_path: Path) -> None:
    import shutil
    import time

    from gapwatch.store import open_store

    db = tmp_path / "live.db"
    shutil.copy(filled.url.removeprefix("sqlite:///"), db)
    url = f"sqlite:///{db}"
    st = open_store(url)
    st.set_sweep_status(filled.sweep_id, "running")
    fast = {"GAPWATCH_UI_REFRESH_S": "1", "GAPWATCH_UI_TTL_S": "0.5"}
    with running_server(url, env=fast) as srv:
        page = browser.new_page(viewport=VIEWPORT)
        load(page, f"{srv.url}/sweep?sweep={filled.sweep_id}", charts=1, views=2, tables=3)
        first = page.get_by_test_id("stMetricValue").first
        assert first.inner_text() == "6"
        st.ensure_run(
            filled.sweep_id, "late", role="control", pair_key="seed9", seed=9,
            compression="none", correction="none", config={"steps": 12},
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and first.inner_text() != "7":
            time.sleep(0.2)
        assert first.inner_text() == "7", "the page did not pick up the new run by itself"
        page.close()
    st.close()


# --- the threshold sweep (tests/ui/conftest.py: fill_thresholds) -------------------------


@pytest.fixture(scope="session")
def t_server(thresholds: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("uilog") / "streamlit-thresholds.log"
    with running_server(thresholds.url, log_path=log) as srv:
        yield srv


def centre(item: dict[str, float]) -> tuple[float, float]:
    return (item["left"] + item["right"]) / 2, (item["top"] + item["bottom"]) / 2


def view(drawn: list[dict[str, Any]], title: str) -> dict[str, Any]:
    found = [v for v in drawn if v["title"] == title]
    assert len(found) == 1, (title, [v["title"] for v in drawn])
    return found[0]


def layer(v: dict[str, Any], index: int, kind: str) -> list[dict[str, Any]]:
    return [it for ly in v["layers"] if ly["layer"] == index and ly["type"] == kind
            for it in ly["items"]]  # fmt: skip


SWEEP_VIEWS = 2 + 3  # spread + outcome; the chosen threshold's three views


def test_threshold_view_draws_each_run_and_the_seed_mean(
    t_server: Server, thresholds: Any, page: Any, tmp_path: Path
) -> None:
    """Per threshold value one point per seed, and the mean line through their mean; the
    values spaced on a linear axis for tis' C (1.5, 2, 4), on a log axis for k3_rs' hi
    (0.001, 0.01, 0.1), both read from the runs' configs."""
    from urllib.parse import quote

    columns = {}
    for corr, param in (("tis", "C"), ("k3_rs", "hi"), ("icepop", "lo")):
        choice = quote(f"topk(keep=0.05) + {corr}: {param}")
        load(page, f"{t_server.url}/sweep?sweep={thresholds.sweep_id}&threshold={choice}",
             charts=1, views=SWEEP_VIEWS, tables=3)  # fmt: skip
        page.screenshot(path=str(tmp_path / f"threshold-{corr}.png"), full_page=True)
        drawn = views(page)
        for what in ("steps survived", "final score"):
            v = view(drawn, f"topk(keep=0.05) + {corr}: {what} vs {param}")
            points = [centre(it) for it in layer(v, 1, "symbol")]
            means = sorted(centre(it) for it in layer(v, 0, "symbol"))
            xs = sorted({round(x) for x, _ in points})
            n_values = 2 if corr == "icepop" else 3
            assert len(points) == 3 * n_values and len(xs) == n_values, (corr, what, xs)
            assert len(means) == n_values
            for (mx, my), x in zip(means, xs, strict=True):
                seeds = [py for px, py in points if abs(px - x) <= 1]
                assert len(seeds) == 3
                # a linear y axis: the mean of the pixels is the pixel of the mean
                assert abs(mx - x) <= 1 and abs(my - sum(seeds) / 3) <= 1.5, (corr, what)
            plot = v["plot"]
            assert all(plot["left"] <= x <= plot["right"] for x in xs)
            columns[corr] = xs
        if corr == "tis":
            ended = view(drawn, "topk(keep=0.05) + tis: runs per ending vs C")
            counts = sorted(it["text"] for it in layer(ended, 1, "text"))
            assert counts == sorted(["3", "1", "1", "1", "3"])  # 1.5: 3 stopped; 4: 3 ran
    c = columns["tis"]  # C = 1.5, 2, 4 on a linear axis: gaps in the ratio 0.5 : 2
    assert (c[2] - c[1]) / (c[1] - c[0]) == pytest.approx(4.0, rel=0.06)
    h = columns["k3_rs"]  # hi = 0.001, 0.01, 0.1 on a log axis: equal gaps
    assert (h[2] - h[1]) == pytest.approx(h[1] - h[0], abs=1.5)


def test_leaderboard_shows_each_strategy_spread(
    t_server: Server, thresholds: Any, page: Any
) -> None:
    """Per strategy, a line from its lowest to its highest run, a tick per run on it and
    the mean between; the table says which strategies overlap."""
    from gapwatch.ui.sweep_model import SPREAD_TITLE

    load(page, f"{t_server.url}/sweep?sweep={thresholds.sweep_id}", charts=1,
         views=SWEEP_VIEWS, tables=3)  # fmt: skip
    v = view(views(page), SPREAD_TITLE)
    rules, ticks, means = layer(v, 0, "rule"), layer(v, 1, "rect"), layer(v, 2, "symbol")
    assert len(rules) == len(means) == 9 and len(ticks) == 27  # 9 strategies x 3 seeds
    for rule in rules:
        _, y = centre(rule)
        on_row = [centre(t)[0] for t in ticks if abs(centre(t)[1] - y) <= 1]
        assert len(on_row) == 3, y
        assert rule["left"] == pytest.approx(min(on_row), abs=1.5)
        assert rule["right"] == pytest.approx(max(on_row), abs=1.5)
        (mean,) = [centre(m)[0] for m in means if abs(centre(m)[1] - y) <= 1]
        assert min(on_row) - 1 <= mean <= max(on_row) + 1
    grid = page.locator("[data-testid='stDataFrame']").nth(1)
    grid.locator("th", has_text="overlaps with").first.wait_for(state="attached")
    grid.locator("td", has_text="dense control, ").first.wait_for(state="attached")
    assert "share a rank" in body_text(page)


def test_stop_labels_never_overlap(
    t_server: Server, thresholds: Any, page: Any, tmp_path: Path
) -> None:
    """Five runs stopped at steps 6-8 by four rules: one label per rule group (three
    score_collapse stops share one), stacked above the plot, no two boxes touching."""
    keys = ["tis(C=1.5)", "tis(C=2)", "icepop(lo=0.5, hi=5)", "icepop(lo=0.8, hi=5)",
            "k3_rs(hi=0.001)", "control"]  # fmt: skip
    ids = ",".join(str(thresholds.ids[(k, 0)]) for k in keys)
    load(page, f"{t_server.url}/compare?runs={ids}", charts=1, views=len(FIGURES))
    page.screenshot(path=str(tmp_path / "stops.png"), full_page=True)
    geo = [g for g in line_geometry(page) if "by turn" not in g["title"]]  # no step axis
    assert len(geo) == len(FIGURES)
    for g in geo:
        labels = g["stopLabels"]
        assert sorted(lab["text"] for lab in labels) == [
            "length_runaway", "post_tool_tail_growth", "score_collapse ×3",
        ], g["title"]  # fmt: skip
        for i, a in enumerate(labels):
            assert a["bottom"] <= g["plot"]["top"], (g["title"], "label over the plot", a)
            for b in labels[i + 1 :]:
                apart = (a["right"] <= b["left"] or b["right"] <= a["left"]
                         or a["bottom"] <= b["top"] or b["bottom"] <= a["top"])  # fmt: skip
                assert apart, (g["title"], a, b)
    red = [v for v in views(page) if v["title"] == "Task score"][0]
    rules = [it for ly in red["layers"] if ly["type"] == "rule" for it in ly["items"]
             if (it["stroke"] or "").lower() == "#d62728"]  # fmt: skip
    assert len(rules) == 5  # one red rule per stopped run


def test_run_page_download_replays(server: Server, filled: Any, page: Any, tmp_path: Path) -> None:
    """The run page's button downloads what `gapwatch export` writes, and `gapwatch replay`
    reads it (with the control's, from the second button) as the page's command says."""
    import json

    from gapwatch.store import open_store

    rid, ctl = filled.ids["t1_none"], filled.ids["c1"]
    load(page, f"{server.url}/run?run={rid}", charts=2, tables=1)
    saved = {}
    for label, which in (("Download run as JSONL", rid), ("Download its dense control", ctl)):
        with page.expect_download() as got:
            page.get_by_role("button", name=label).click()
        path = tmp_path / got.value.suggested_filename
        got.value.save_as(path)
        saved[which] = path
    assert saved[rid].name == f"run-{rid}.jsonl" and saved[ctl].name == f"run-{ctl}.jsonl"
    st = open_store(filled.url, read_only=True)
    exported = tmp_path / "exported.jsonl"
    st.export_run(rid, exported)
    st.close()
    assert saved[rid].read_bytes() == exported.read_bytes()
    command = page.locator("[data-testid='stCode']").first.inner_text().strip()
    assert command == f"gapwatch replay run-{rid}.jsonl --control run-{ctl}.jsonl"
    args = command.split()[1:] + ["--json"]
    done = subprocess.run(
        [sys.executable, "-m", "gapwatch.orchestrator.cli", *args], cwd=tmp_path,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result, done.stdout


# --- hostile strings: nothing stored or put in a URL makes a viewer's browser fetch ------


def test_hostile_strings_fetch_nothing_and_link_nowhere(
    browser: Any, hostile: Any, tmp_path: Path
) -> None:
    """A sweep name, run labels, a stored error and URL parameters carrying markdown and
    HTML that point at a planted host (a real local HTTP server) are shown as text: the
    planted host gets no request, and no link or image on any page points at it."""
    import threading
    import urllib.parse
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    hits: list[str] = []

    class Planted(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server API)
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    planted = ThreadingHTTPServer(("127.0.0.1", 0), Planted)
    threading.Thread(target=planted.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{planted.server_address[1]}"
    bad = (
        f"![x](http://{host}/q.png) [phish](http://{host}/login) "
        f'<img src="http://{host}/i.png"> <a href="http://{host}/a">a</a> :red[r]'
    )
    url = f"sqlite:///{tmp_path}/hostile.db"
    sid, rid = hostile(url, bad)
    q = urllib.parse.quote(bad)
    seen: list[str] = []
    page = browser.new_page(viewport=VIEWPORT)
    page.on("request", lambda r: seen.append(r.url))
    try:
        with running_server(url, log_path=tmp_path / "streamlit.log") as srv:
            for path, tables in [
                ("/", 1),
                (f"/sweep?sweep={sid}&threshold={q}", 1),
                (f"/sweep?sweep={q}", 0),
                (f"/run?run={rid}", 0),
                (f"/compare?runs={rid}&points={q}", 0),
            ]:
                load(page, srv.url + path, tables=tables)
                page.wait_for_timeout(500)  # let any image or prefetch start
                pointing = page.locator(f"a[href*='{host}'], img[src*='{host}']").count()
                assert pointing == 0, (
                    path,
                    page.eval_on_selector_all(
                        f"a[href*='{host}'], img[src*='{host}']",
                        "es => es.map(e => e.outerHTML.slice(0, 300))",
                    ),
                )
            text = body_text(page)
    finally:
        page.close()
        planted.shutdown()
    assert "[phish](" in text or "phish" in text  # shown, as text
    assert not [u for u in seen if host in u], seen
    assert hits == []
