"""The UI's sweep page while a 1,000-trial sweep is being written (issue 21, item 4).

    .venv/bin/python bench/ui_while_writing.py [--trials 1000] [--steps 60] [--loads 6]

One driver (``bench/driver_sim.py``'s ``simulate``: the Monitor and the Recorder with its
writer thread, pinned to one core, every trial reporting every 2 s) writes a sweep of
``--trials`` trials into a SQLite store. While it writes, a Streamlit server (the real
UI, ``ui.launch.running_server``) serves that store and Debian's Chromium loads the
sweep's page ``--loads`` times, each after the UI's query cache has expired (every query
runs again against a store being written). A load counts as drawn when the page holds
the charts, views and tables a first load (its warm-up) settled on, checked in the page
once per animation frame (``tools.browser.load``). Target: each load within 2 s. Writes
bench/results/ui_while_writing.md with the machine, the date and the command.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _machine import machine  # noqa: E402
from driver_sim import simulate  # noqa: E402
from pipeline_bench import step_pool, synthetic_row  # noqa: E402

from gapwatch.store import open_store  # noqa: E402
from gapwatch.ui.launch import running_server  # noqa: E402
from gapwatch.ui.locate import TTL_S  # noqa: E402
from tools.browser import VIEWPORT, chromium, drawn_state, load  # noqa: E402

OUT = ROOT / "bench" / "results" / "ui_while_writing.md"
TARGET_S = 2.0


def _sweep_id(url: str, deadline: float) -> int:
    """The id of the sweep the driver creates (the store's first), once it is there."""
    while time.monotonic() < deadline:
        try:
            st = open_store(url, read_only=True)
            sweeps = st.sweeps()
            st.close()
            if sweeps:
                return int(sweeps[0].id)
        except Exception:  # noqa: BLE001 - the store is being created this moment
            pass
        time.sleep(0.5)
    raise SystemExit("ui_while_writing: the driver created no sweep within 60 s")


def measure(url: str, loads: int, done: threading.Event, out: dict[str, object]) -> None:
    """Serve ``url``, load its sweep page ``loads`` times while ``done`` is not set."""
    try:
        sid = _sweep_id(url, time.monotonic() + 60)
        path = f"/sweep?sweep={sid}"
        with running_server(url, timeout_s=120) as srv, chromium() as browser:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(srv.url + path, wait_until="load")
            time.sleep(15)  # the warm-up: let the page settle, then read what it draws
            want = drawn_state(page)
            out["want"] = want
            times, at = [], []
            for _ in range(loads):
                if done.is_set():
                    break
                time.sleep(TTL_S + 0.5)  # every cached query expired: the store is read again
                at.append(time.monotonic())
                times.append(load(page, srv.url + path, charts=want["charts"],
                                  views=want["views"], tables=want["tables"], timeout_s=60))  # fmt: skip
            out["times"], out["at"], out["during"] = times, at, not done.is_set()
    except Exception as exc:  # noqa: BLE001 - reported in the results, the driver goes on
        out["error"] = " ".join(str(exc).split())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--loads", type=int, default=6)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    cmd = " ".join(["python bench/ui_while_writing.py", *map(shlex.quote, sys.argv[1:])])
    mach = machine()  # before the driver pins this thread to one core
    with tempfile.TemporaryDirectory(prefix="gw-ui-writing-") as tmp:
        work = Path(tmp)
        url = f"sqlite:///{work}/sweep.db"
        open_store(url).close()
        done, got = threading.Event(), {}  # type: ignore[var-annotated]
        probe = threading.Thread(target=measure, args=(url, args.loads, done, got), daemon=True)
        probe.start()
        t0 = time.monotonic()
        res = simulate(url, trials=args.trials, steps=args.steps, interval=args.interval,
                       writer="thread", pool=step_pool(), row_fn=synthetic_row, work=work)  # fmt: skip
        t_end = time.monotonic()
        done.set()
        probe.join(timeout=180)
    times = list(got.get("times", []))  # type: ignore[call-overload]
    during = [x for x, a in zip(times, got.get("at", []), strict=False) if a < t_end]  # type: ignore[call-overload]
    lines = [
        f"## The sweep page while {args.trials:,} trials are written (bench/ui_while_writing.py)",
        "",
        f"- machine: {mach}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- command: `{cmd}`",
        f"- the driver: {args.trials:,} simulated trials x {args.steps} steps, a report every "
        f"{args.interval:g} s per trial, Monitor + Recorder (writer thread) pinned to one core, "
        f"SQLite; {res.results:,} results in {t_end - t0:.0f} s",
        "- the page: the real Streamlit UI on that store, Debian Chromium (headless); each "
        f"load after the UI's {TTL_S:.0f} s query cache expired, timed from navigation start "
        "until it holds what its warm-up load settled on "
        f"({got.get('want', {})})",
        "",
    ]
    if "error" in got:
        lines.append(f"Not measured: {got['error']}")
    elif during:
        med = statistics.median(during)
        lines += [
            "| figure | value |",
            "|---|---|",
            f"| loads while the sweep was being written | {len(during)} |",
            f"| seconds to drawn, median | {med:.2f} |",
            f"| seconds to drawn, max | {max(during):.2f} |",
            f"| all loads | {', '.join(f'{x:.2f}' for x in during)} |",
            f"| target | <= {TARGET_S:.0f} s: {'met' if max(during) <= TARGET_S else 'NOT met'} |",
        ]
    else:
        lines.append("Not measured: no load finished while the sweep was being written.")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
