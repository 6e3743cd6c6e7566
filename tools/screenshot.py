"""Screenshot the pair page (a stopped treatment next to its dense control) of any store.

    python -m tools.screenshot --db sqlite:///gapwatch.db --out docs/img/pair.png [--runs 2,1]
        [--query log=1]

Without ``--runs`` it picks the first stopped treatment and its control (else the first
treatment, else the first run). Starts a headless server on a free loopback port, waits
until every chart is drawn, writes a full-page PNG, and stops the server.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from gapwatch.ui import data
from gapwatch.ui.launch import check, running_server
from gapwatch.ui.locate import UIError, resolve
from tools.browser import VIEWPORT, BrowserError, chromium, load

PAIR_VIEWS = 8  # six figures and two ECDFs, in one chart
_HEIGHT_JS = """() => {
  const m = document.querySelector('[data-testid="stMain"]');
  return Math.max(m ? m.scrollHeight : 0, document.body.scrollHeight) + 40;
}"""


def pick_pair(db_url: str) -> list[int]:
    """Run ids to show: a stopped treatment and its control, or the best available."""
    from gapwatch.store import open_store

    check(db_url)
    st = open_store(db_url, read_only=True)
    runs: list[dict[str, Any]] = [
        {"id": r.id, "role": r.role, "pair_key": r.pair_key, "status": r.status} for r in st.runs()
    ]
    st.close()
    if not runs:
        raise UIError(f"the store at {db_url} holds no run to screenshot")
    for wanted in ("stopped", None):
        for r in runs:
            if r["role"] == "treatment" and (wanted is None or r["status"] == wanted):
                return data.pair_of(r, runs)
    return [int(runs[0]["id"])]


def shoot(
    db_url: str, out: Path, runs: list[int] | None = None, extra: str = "log=1",
    settle_s: float = 1.0,
) -> Path:  # fmt: skip
    """Write the compare page of ``runs`` (default: :func:`pick_pair`) to ``out``.

    ``extra``: more URL parameters; by default the log axis, on which a dense control's
    gap (~0.006) and a compressed run's (~0.6) are both readable.
    """
    ids = runs or pick_pair(db_url)
    out.parent.mkdir(parents=True, exist_ok=True)
    query = "compare?runs=" + ",".join(map(str, ids)) + (f"&{extra}" if extra else "")
    with running_server(db_url) as srv, chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        load(page, f"{srv.url}/{query}", charts=1, views=PAIR_VIEWS, timeout_s=60)
        # Streamlit scrolls inside its main block, so grow the viewport to the content
        height = int(page.evaluate(_HEIGHT_JS))
        page.set_viewport_size({"width": VIEWPORT["width"], "height": min(height, 6000)})
        time.sleep(settle_s)  # let the charts re-fit the new size
        page.screenshot(path=str(out), full_page=True)
        page.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--db", default=None, help="store URL (default: $GAPWATCH_DB_URL or ./gapwatch.db)"
    )
    ap.add_argument("--out", type=Path, default=Path("docs/img/pair.png"))
    ap.add_argument(
        "--runs", default=None, help="comma-separated run ids (default: a stopped pair)"
    )
    ap.add_argument("--query", default="log=1", help="more URL parameters (default: log=1)")
    args = ap.parse_args(argv)
    try:
        ids = data.parse_int_list(args.runs) or None
        path = shoot(resolve(args.db), args.out, ids, extra=args.query)
    except (UIError, BrowserError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
