"""Pure data shaping for the UI: store rows (as plain dicts) in, pandas frames out.

Nothing here talks to Streamlit or to the database, so every table and every derived
figure the pages show (runs table, steps saved, ECDFs, chart frames) is
tested on plain data (``ui.board`` has the strategies across seeds). ``ui.source`` turns
store rows into the dicts these functions take.

Row dicts carry the store's field names: a run has ``id, sweep_id, trial_id, role,
pair_key, seed, compression, correction, config, status, stop_rule, stop_step, error,
attempts`` (how many times its trainer was started; None for older runs) and ``last_step``
(the newest stored step, or None).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gapwatch.correction import names
from gapwatch.store.schema import INTERRUPTED, RUN_STATUSES

BUDGET_KEYS: tuple[str, ...] = ("steps", "max_steps", "total_steps", "num_steps")
"""Config keys that may hold a run's step budget (the first one present wins)."""

POINTS_PER_CHART = 1000
"""Default points budget of one comparison chart, shared by its runs' series. Drawing
cost grows with the points (about 50 us each on a 2-core EPYC VM: Streamlit's CSP-safe
Vega interprets every point's encoding): 1,000 gives a pair 500 points a line and ten
runs 100, a bucket's min and max every ~8 px of the chart's 420 px (the page's "max
points per line" asks for more)."""
MIN_POINTS = 50
MAX_POINTS = 1000
MAX_COMPARE = 20
"""Most runs the compare page draws at once: 20 colours tell the lines apart (tableau20)
and the page stays within its drawing budget; a link asking for more is refused."""

LAST_SCORE = names.SCORE_MEAN
LAST_GAP = names.PROBS_DIFF_MEAN


def step_budget(config: Mapping[str, Any] | None) -> int | None:
    """The run's step budget from its config, or None where the config names none."""
    if not config:
        return None
    for key in BUDGET_KEYS:
        value = config.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return int(value)
    return None


def run_label(run: Mapping[str, Any]) -> str:
    """A short human name for a run: ``#id role codec/correction s<seed>``."""
    if run.get("role") == "control":
        kind = "dense control"
    else:
        kind = f"{run.get('compression') or '?'}/{run.get('correction') or 'none'}"
    seed = run.get("seed")
    seed_part = f" s{seed}" if seed is not None else ""
    return f"#{run['id']} {kind}{seed_part}"


def _finite(value: float | None) -> float | None:
    if value is None:
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def sweeps_table(
    sweeps: Sequence[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]] | None = None
) -> pd.DataFrame:
    """One row per sweep: id, name, status, created, total runs and runs per status.

    Counts come from each sweep's ``run_counts`` (the store counts in SQL) unless
    ``runs`` is given, in which case they are counted from those rows.
    """
    counts: dict[int, dict[str, int]] = {}
    if runs is not None:
        for r in runs:
            c = counts.setdefault(int(r["sweep_id"]), {})
            status = str(r.get("status") or "unknown")
            c[status] = c.get(status, 0) + 1
    rows = []
    for s in sweeps:
        c = counts.get(int(s["id"]), {}) if runs is not None else dict(s.get("run_counts") or {})
        rows.append(
            {
                "id": int(s["id"]),
                "name": s.get("name"),
                "status": s.get("status"),
                "created": s.get("created"),
                "runs": sum(c.values()),
                **{k: c.get(k, 0) for k in RUN_STATUSES},
            }
        )
    cols = ["id", "name", "status", "created", "runs", *RUN_STATUSES]
    return pd.DataFrame(rows, columns=cols)


def sweep_times(runs: Sequence[Mapping[str, Any]]) -> dict[int, tuple[Any, Any]]:
    """Per sweep: (first run's start, last run's end), the end None while a run is open."""
    out: dict[int, tuple[Any, Any]] = {}
    open_sweeps: set[int] = set()
    for r in runs:
        sid = int(r["sweep_id"])
        start, end = r.get("started"), r.get("ended")
        first, last = out.get(sid, (None, None))
        if start is not None and (first is None or start < first):
            first = start
        if end is None:
            open_sweeps.add(sid)
        elif last is None or end > last:
            last = end
        out[sid] = (first, last)
    return {sid: (a, None if sid in open_sweeps else b) for sid, (a, b) in out.items()}


def runs_table(
    runs: Sequence[Mapping[str, Any]], latest: Mapping[int, Mapping[str, float | None]]
) -> pd.DataFrame:
    """The sweep page's runs table: one row per run, the figures a user sorts by."""
    rows = []
    for r in runs:
        rid = int(r["id"])
        last = latest.get(rid, {})
        budget = step_budget(r.get("config"))
        used = r.get("last_step")
        rows.append(
            {
                "id": rid,
                "run": run_label(r),
                "role": r.get("role"),
                "seed": r.get("seed"),
                "codec": r.get("compression"),
                "correction": r.get("correction"),
                "status": r.get("status"),
                "stop rule": r.get("stop_rule"),
                "stop step": r.get("stop_step"),
                "attempts": r.get("attempts"),
                "steps used": used,
                "budget": budget,
                "used/budget": (used / budget) if used is not None and budget else None,
                "last score": _finite(last.get(LAST_SCORE)),
                "last gap": _finite(last.get(LAST_GAP)),
                "pair": r.get("pair_key"),
                "error": r.get("error"),
            }
        )
    cols = [
        "id", "run", "role", "seed", "codec", "correction", "status", "stop rule",
        "stop step", "attempts", "steps used", "budget", "used/budget", "last score", "last gap",
        "pair", "error",
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def filter_runs(
    table: pd.DataFrame,
    *,
    statuses: Iterable[str] | None = None,
    roles: Iterable[str] | None = None,
    corrections: Iterable[str] | None = None,
    text: str | None = None,
) -> pd.DataFrame:
    """Rows of ``table`` matching every given filter (None or empty = no filter)."""
    out = table
    for col, allowed in (("status", statuses), ("role", roles), ("correction", corrections)):
        if allowed:
            out = out[out[col].isin(list(allowed))]
    if text:
        needle = text.lower()
        keep = [needle in " ".join(str(v) for v in row).lower() for row in out.itertuples()]
        out = out[keep]
    return out


def sort_runs(table: pd.DataFrame, column: str | None, descending: bool = False) -> pd.DataFrame:
    """``table`` sorted by ``column`` (missing values last); unknown column -> ValueError."""
    if not column:
        return table
    if column not in table.columns:
        raise ValueError(f"cannot sort by {column!r}; columns: {', '.join(table.columns)}")
    return table.sort_values(column, ascending=not descending, na_position="last", kind="stable")


def steps_survived(row: Mapping[str, Any]) -> int | None:
    """Steps a run ran: its stop step when stopped, else its newest stored step."""
    stop = row.get("stop step")
    if stop is not None and not pd.isna(stop):
        return int(stop)
    used = row.get("steps used")
    return None if used is None or pd.isna(used) else int(used)


def stopped_by_rule(table: pd.DataFrame) -> pd.Series:
    """Which runs a rule stopped: ``stopped``, but not by a person (Ctrl-C, stop rule
    :data:`store.schema.INTERRUPTED`)."""
    return (table["status"] == "stopped") & (table["stop rule"] != INTERRUPTED)


def steps_saved(table: pd.DataFrame) -> int:
    """Trial-steps early stopping saved: sum over the runs a rule stopped of budget - stop
    step (a run a person interrupted saved nothing by early stopping)."""
    total = 0
    stopped = table[stopped_by_rule(table) & table["budget"].notna()]
    for budget, stop, used in zip(
        stopped["budget"], stopped["stop step"], stopped["steps used"], strict=True
    ):
        ran = steps_survived({"stop step": stop, "steps used": used})
        if ran is not None:
            total += max(0, int(budget) - ran)
    return total


SERIES_COLUMNS = ("run_id", "name", "step", "value", "flag")


def series_frame(points: Iterable[Any], labels: Mapping[int, str]) -> pd.DataFrame:
    """Store points -> columns run_id, run, name, step, value (NaN where not finite), flag.

    ``points``: mappings with the store's Point fields, or Point tuples themselves
    (run_id, name, step, value, flag), which build the frame without a per-point dict.
    """
    rows = list(points)
    if rows and isinstance(rows[0], Mapping):
        rows = [tuple(p.get(c) for c in SERIES_COLUMNS) for p in rows]
    df = pd.DataFrame.from_records(rows, columns=list(SERIES_COLUMNS))
    df["run_id"] = df["run_id"].astype("int64")
    df["step"] = df["step"].astype("int64")
    value = pd.to_numeric(df["value"], errors="coerce").astype("float64")
    df["value"] = value.where(np.isfinite(value))
    names_for = {i: labels.get(int(i), f"#{i}") for i in df["run_id"].unique()}
    df.insert(1, "run", df["run_id"].map(names_for).astype(object))
    df = df.astype({"name": object, "flag": object})
    return df.sort_values(["run_id", "name", "step"], kind="stable").reset_index(drop=True)


def turn_profile(df: pd.DataFrame, bucket_of: Mapping[str, str]) -> pd.DataFrame:
    """Per run and interaction-index bucket, the mean of a per-turn gap over the run's
    steps: columns run, turn, gap, steps (how many steps had tokens in that bucket).

    ``df`` is a series frame; ``bucket_of`` maps each per-turn metric name to its bucket
    label (``"1"`` .. ``"5+"``). Non-finite values are left out of the mean."""
    rows = df[df["name"].isin(list(bucket_of))].dropna(subset=["value"])
    if rows.empty:
        return pd.DataFrame(columns=["run", "turn", "gap", "steps"])
    rows = rows.assign(turn=rows["name"].map(bucket_of))
    out = rows.groupby(["run", "turn"], sort=False)["value"].agg(["mean", "count"])
    out = out.reset_index().rename(columns={"mean": "gap", "count": "steps"})
    order = {b: i for i, b in enumerate(bucket_of.values())}
    return out.sort_values(["run", "turn"], key=lambda c: c.map(order) if c.name == "turn" else c)


def non_finite_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per run and metric: how many stored values were not finite, and at which steps."""
    bad = df[df["value"].isna()]
    if bad.empty:
        return pd.DataFrame(columns=["run", "name", "count", "steps", "flag"])
    grouped = bad.groupby(["run", "name"], sort=True)
    out = grouped.agg(
        count=("step", "size"),
        steps=("step", lambda s: ", ".join(str(x) for x in list(s)[:10])),
        flag=("flag", lambda f: ", ".join(sorted({str(x) for x in f if x is not None}))),
    )
    return out.reset_index()


def ecdf_frame(payload: Mapping[str, Any]) -> pd.DataFrame:
    """A distribution payload -> ECDF points (value = bucket upper bound, cdf in (0, 1]).

    The payload layout is fixed in docs/interfaces.md: ``upper`` and ``counts`` lists of
    equal length, ``upper`` increasing. A payload that breaks it -> ValueError.
    """
    upper = np.asarray(payload.get("upper") or [], dtype="float64")
    counts = np.asarray(payload.get("counts") or [], dtype="float64")
    if len(upper) != len(counts):
        raise ValueError(
            f"distribution payload has {len(upper)} upper bounds but {len(counts)} counts; "
            "they must be the same length (see docs/interfaces.md)"
        )
    total = counts.sum()
    if total <= 0:
        return pd.DataFrame(columns=["value", "cdf"])
    return pd.DataFrame({"value": upper, "cdf": np.cumsum(counts) / total})


def auto_points(n_lines: int) -> int:
    """Default max points per series for a chart of ``n_lines`` lines.

    Few lines get full detail (up to MAX_POINTS each); many share POINTS_PER_CHART, so a
    page of eight charts stays fast to draw. Downsampling keeps every bucket's min and
    max, so spikes survive at any setting.
    """
    return max(MIN_POINTS, min(MAX_POINTS, POINTS_PER_CHART // max(1, n_lines)))


def thin_ecdf(ecdf: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """At most ``max_points`` evenly spaced rows of an ECDF frame, first and last kept."""
    n = len(ecdf)
    if n <= max_points or max_points < 2:
        return ecdf
    pick = sorted({round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})
    return ecdf.iloc[pick].reset_index(drop=True)


def default_steps(steps: Sequence[int]) -> list[int]:
    """Early, middle and late: the first, middle and last stored step (deduplicated)."""
    s = sorted(set(steps))
    if not s:
        return []
    picks = [s[0], s[len(s) // 2], s[-1]]
    return sorted(set(picks))


def nearest_step(steps: Sequence[int], wanted: int) -> int | None:
    """The stored step closest to ``wanted`` (ties go to the earlier), or None if none."""
    if not steps:
        return None
    return min(steps, key=lambda s: (abs(s - wanted), s))


def parse_int_list(text: str | None) -> list[int]:
    """``"3,1,2"`` -> ``[3, 1, 2]``; blanks and anything but plain ASCII integers (``²``,
    ``1e3``, 19+ digits) are dropped (URLs get edited)."""
    if not text:
        return []
    out = []
    for part in text.split(","):
        part = part.strip()
        if part.isascii() and part.lstrip("-").isdigit() and len(part) <= 18:
            out.append(int(part))
    return out


def pair_index(runs: Sequence[Mapping[str, Any]]) -> dict[int, list[int]]:
    """Every run's :func:`pair_of` at once (one pass, not one scan of ``runs`` per run)."""
    controls: dict[Any, list[int]] = {}
    for r in runs:
        if r.get("role") == "control" and r.get("pair_key") is not None:
            controls.setdefault(r["pair_key"], []).append(int(r["id"]))
    out = {}
    for r in runs:
        rid = int(r["id"])
        out[rid] = [rid, *(c for c in controls.get(r.get("pair_key"), []) if c != rid)]
    return out


def pair_of(run: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> list[int]:
    """The run and its paired control (same pair key, role control), run first."""
    ids = [int(run["id"])]
    key = run.get("pair_key")
    if key is None:
        return ids
    for r in runs:
        if r.get("pair_key") == key and int(r["id"]) != ids[0] and r.get("role") == "control":
            ids.append(int(r["id"]))
    return ids
