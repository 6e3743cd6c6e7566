"""``gapwatch runs``: print what the store holds, as rich tables.

A run the store holds as ``running`` whose process can no longer end it (killed with
SIGKILL, lost with its machine) is shown ``stale``: silent for longer than its own step
interval allows, with no live process behind it (the rule: ``store.staleness``). That is
a display only: the stored status stays as it is, because the process may live where
this machine cannot see it (another host), and only it knows how the run ended.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from rich.table import Table

from gapwatch.correction import names
from gapwatch.store import open_store
from gapwatch.store.staleness import STALE_FLOOR_S, STALE_STEPS, shown_status

from .console import console as make_console
from .console import plain, shown
from .errors import GapwatchError


def print_runs(db_url: str | None, sweep_name: str | None = None) -> None:
    """Print every sweep with its run counts, then each run (optionally of one sweep)."""
    st = open_store(db_url, read_only=True)
    console = make_console(width=200)
    sweeps = st.sweeps()
    if sweep_name is not None:
        sweeps = [s for s in sweeps if s.name == sweep_name]
        if not sweeps:
            valid = ", ".join(s.name for s in st.sweeps()) or "none"
            raise GapwatchError(
                f"no sweep named {plain(sweep_name)!r} in the store; sweeps: {plain(valid)}"
            )
    console.print(f"store: {plain(st.url_display)}", markup=False)
    runs = st.runs()
    if sweep_name is not None:
        runs = [r for r in runs if r.sweep_id == sweeps[0].id]
    if not sweeps and not runs:
        console.print("the store is empty: run `gapwatch sweep` or `gapwatch run` first")
        return
    now = datetime.now(UTC)
    status = {r.id: shown_status(r, now) for r in runs}
    stale = Counter(r.sweep_id for r in runs if status[r.id] == "stale")

    t = Table(title="sweeps")
    for col in ("id", "name", "status", "created", "runs"):
        t.add_column(col)
    for s in sweeps:
        by_status = Counter(s.run_counts)
        by_status.update({"running": -stale[s.id], "stale": stale[s.id]})
        counts = ", ".join(f"{k} {v}" for k, v in sorted(by_status.items()) if v > 0)
        t.add_row(str(s.id), shown(s.name), s.status, f"{s.created:%Y-%m-%d %H:%M}", counts)
    console.print(t)

    latest = st.latest([r.id for r in runs], [names.SCORE_MEAN, names.PROBS_DIFF_MEAN])
    t = Table(title="runs")
    for col in (
        "id",
        "sweep",
        "trial",
        "role",
        "seed",
        "codec",
        "correction",
        "status",
        "stop",
        "steps",
        "score",
        "gap",
    ):
        t.add_column(col)
    for r in runs:
        last = latest.get(r.id, {})
        stop = f"{r.stop_rule}@{r.stop_step}" if r.stop_rule else ""
        t.add_row(
            str(r.id),
            str(r.sweep_id or ""),
            shown(r.trial_id),
            r.role,
            str(r.seed),
            shown(r.compression),
            shown(r.correction),
            status[r.id],
            shown(stop),
            str(r.last_step or 0),
            _fmt(last.get(names.SCORE_MEAN)),
            _fmt(last.get(names.PROBS_DIFF_MEAN)),
        )
    console.print(t)
    if n := sum(stale.values()):
        console.print(
            f"{n} run(s) stale: stored as running but silent for over {STALE_STEPS:g} of their "
            f"step intervals (and {STALE_FLOOR_S / 60:g} min), with no live process seen here; "
            "check their trainers (this listing changes nothing in the store)",
            markup=False,
            soft_wrap=True,
        )


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"
