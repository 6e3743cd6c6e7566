"""The hardening probes of issue 13, run against a checkout: exit code, first line said,
whether a traceback showed, and whether recorded data was kept.

    .venv/bin/python bench/hardening_probes.py                      # this checkout
    .venv/bin/python bench/hardening_probes.py --tree ../old --label before

Each probe runs the checkout's own CLI (``python -c 'from gapwatch.orchestrator.cli import main;
main()'`` with the checkout first on ``sys.path``) or its sweep config loader in a
subprocess, in a fresh temporary folder. Run it on an old commit (``git worktree add
../old <rev>``) and on this one to get the before/after table (a tree from before the
gapwatch.* import names needs the probes of its own commit); the UI probes (markdown in
names and URL parameters, ``points=99999999``) and the secrets in Tune's state are
checked by tests (tests/ui, tests/orchestrator/test_hardening.py), not here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from gapwatch.orchestrator.cli import main; sys.argv[0] = 'gapwatch'; main()"
LOAD = """
import sys
from gapwatch.orchestrator.sweep.config import load_sweep_config
try:
    load_sweep_config(sys.argv[1])
except Exception as e:
    if type(e).__name__ != "GapwatchError":  # what the CLI catches; the rest is shown raw
        raise
    sys.exit(print(f"error: {e}", file=sys.stderr) or 2)
print("accepted")
"""
"""The sweep config loader as ``gapwatch sweep`` calls it, without starting the sweep."""
SCORE, LOSS = "critic/score/mean", "actor/pg_loss"
TREE = ROOT  # the checkout probed (main sets it)
STORE = Path(tempfile.gettempdir()) / f"gapwatch_probe_{os.getpid()}.db"
"""A one-run store made with the probed checkout's code (the export probes copy it)."""


@dataclass
class Probe:
    name: str
    setup: Callable[[Path], list[str]]
    """Writes what the probe needs into the folder; returns the argv after the program."""
    program: str = CLI
    kept: Callable[[Path, str], str] | None = None
    """Says whether data was kept (or what happened to it), from the folder and output."""
    look: str = "stop"
    """On success, the first output line holding this is the one shown."""


def _jsonl(rows: list[dict[str, object]] | list[str]) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def _log(d: Path, text: str, name: str = "log.jsonl") -> Path:
    (d / name).write_text(text)
    return d / name


def _healthy(n: int) -> list[dict[str, object]]:
    return [{"step": s, SCORE: 0.3, LOSS: 0.1} for s in range(1, n + 1)]


def _nan_score(d: Path) -> list[str]:
    rows = [f'{{"step": {s}, "{SCORE}": {"NaN" if s >= 4 else 0.3}, "{LOSS}": 0.1}}'
            for s in range(1, 9)]  # fmt: skip
    return ["replay", str(_log(d, _jsonl(rows)))]


def _csv(rows: list[tuple[int, str, object]]) -> str:
    return "step,name,value\n" + "".join(f"{s},{n},{v}\n" for s, n, v in rows)


def _csv_neg_inf(d: Path) -> list[str]:
    rows = [(s, SCORE, "-1e999" if s >= 4 else 0.3) for s in range(1, 9)]
    return ["replay", str(_log(d, _csv(rows), "log.csv"))]


def _markup_key(d: Path) -> list[str]:
    return ["replay", str(_log(d, _jsonl([{"step": 1, "[/x]": "text", SCORE: 0.3}])))]


def _escape_key(d: Path) -> list[str]:
    return ["replay", str(_log(d, _jsonl([{"step": 1, "\x1b[2J\x1b[31mred": "x", SCORE: 0.3}])))]


def _line_separator(d: Path) -> list[str]:
    row = '{"step": 1, "note": "a\u2028b", "' + SCORE + '": 0.3}'
    return ["replay", str(_log(d, row + "\n" + _jsonl(_healthy(3)[1:])))]


def _json_inf(d: Path) -> list[str]:
    rows = [(s, SCORE, "1e999" if s == 2 else 0.3) for s in range(1, 5)]
    return ["replay", str(_log(d, _csv(rows), "log.csv")), "--json"]


def _json_valid(d: Path, out: str) -> str:
    def refuse(c: str) -> float:
        raise ValueError(c)

    try:
        json.loads(out, parse_constant=refuse)
    except ValueError as e:
        return f"output is not valid JSON ({str(e)[:30]})"
    return "valid JSON"


def _huge_step(d: Path) -> list[str]:
    return ["replay", str(_log(d, _jsonl([{"step": 1e300, SCORE: 0.3}, *_healthy(2)])))]


def _dup_steps(d: Path) -> list[str]:
    rows = [
        *_healthy(3),
        {"step": 2, SCORE: -1.0},
        {"step": 5, SCORE: 0.3},
        {"step": 4, SCORE: 0.3},
    ]
    return ["replay", str(_log(d, _jsonl(rows)))]


def _long_line(d: Path) -> list[str]:
    row = {"step": 1, SCORE: 0.3, "blob": "x" * (20 << 20)}
    return ["replay", str(_log(d, _jsonl([row, *_healthy(3)[1:]])))]


def _export_mistyped(d: Path) -> list[str]:
    return ["export", "1", "-o", str(d / "out.jsonl"), "--db", f"sqlite:///{d}/typo.db"]


def _created(name: str) -> Callable[[Path, str], str]:
    return lambda d, _: f"{name} {'created' if (d / name).exists() else 'not created'}"


def _export_overwrite(d: Path) -> list[str]:
    import shutil

    shutil.copy(STORE, d / "s.db")
    (d / "out.jsonl").write_text("precious\n")
    return ["export", "1", "-o", str(d / "out.jsonl"), "--db", f"sqlite:///{d}/s.db"]


def _precious(d: Path, _: str) -> str:
    kept = (d / "out.jsonl").read_text() == "precious\n"
    return "existing -o file kept" if kept else "existing -o file overwritten"


def _empty_db(d: Path) -> list[str]:
    (d / "empty.db").write_bytes(b"")
    return ["runs", "--db", f"sqlite:///{d}/empty.db"]


def _empty_kept(d: Path, _: str) -> str:
    size = (d / "empty.db").stat().st_size
    return "0-byte file left alone" if size == 0 else f"0-byte file made a store ({size} B)"


def _pg(url: str) -> Callable[[Path], list[str]]:
    return lambda d: ["runs", "--db", url]


def _secret_shown(d: Path, out: str) -> str:
    return "password shown" if "Pl4nted" in out else "password masked"


def _config(change: str) -> Callable[[Path], list[str]]:
    def go(d: Path) -> list[str]:
        base = (TREE / "examples" / "quickstart.yaml").read_text()
        key = change.split(":")[0]
        lines = [ln for ln in base.splitlines() if not ln.startswith(f"{key}:")]
        (d / "c.yaml").write_text("\n".join([*lines, change]) + "\n")
        return [str(d / "c.yaml")]

    return go


PROBES = [
    Probe("NaN score in a log (replay)", _nan_score),
    Probe("-1e999 score in a CSV (replay)", _csv_neg_inf),
    Probe("metric key `[/x]`, a text value (replay)", _markup_key, look="ignored",
          kept=lambda d, out: "key shown as typed" if "[/x]" in out else ""),
    Probe("escape sequence in a metric key (replay)", _escape_key, look="ignored",
          kept=lambda d, out: "raw ESC reached the terminal" if "\x1b[2J" in out else "no raw ESC"),
    Probe("U+2028 inside a JSON string (replay)", _line_separator),
    Probe("1e999 in a CSV, `--json` (replay)", _json_inf, kept=_json_valid),
    Probe("step 1e300 (replay)", _huge_step),
    Probe("duplicate and out-of-order steps (replay)", _dup_steps, look="order"),
    Probe("a 20 MiB line (replay)", _long_line),
    Probe("export from a mistyped --db", _export_mistyped, kept=_created("typo.db")),
    Probe("export onto an existing -o file", _export_overwrite, kept=_precious),
    Probe("a 0-byte file as --db (runs)", _empty_db, kept=_empty_kept),
    Probe("PostgreSQL role that does not exist (runs)",
          _pg("postgresql://no_such_role@127.0.0.1:5432/test")),
    Probe("PostgreSQL URL with a bad port (runs)",
          _pg("postgresql://u:Pl4nted@127.0.0.1:notaport/test"), kept=_secret_shown),
    Probe("config `steps: 1000000000000`", _config("steps: 1000000000000"), program=LOAD),
    Probe("config `group_size: 1000000000`", _config("group_size: 1000000000"), program=LOAD),
    Probe("config with a 10,005-trial grid", _config(f"seeds: {list(range(2001))}"),
          program=LOAD),
]  # fmt: skip


def first_line(out: str, look: str = "stop") -> str:
    """The line that says what happened: a traceback's last line, else the first line
    holding ``look``, else the first line."""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    if any(ln.startswith("Traceback") for ln in lines):
        return "Traceback ... " + lines[-1][:90]
    hits = [ln for ln in lines if look in ln.lower()]
    return (hits or lines or ["(nothing)"])[0][:110]


def run(tree: Path) -> list[dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": str(tree), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("GAPWATCH_DB", None)
    rows = []
    for p in PROBES:
        with tempfile.TemporaryDirectory(prefix="probe_") as tmp:
            d = Path(tmp)
            argv = p.setup(d)
            res = subprocess.run(
                [sys.executable, "-c", p.program, *argv], cwd=tree, env=env,
                capture_output=True, text=True, errors="replace", timeout=300,
            )  # fmt: skip
            out = res.stdout + res.stderr
            said = first_line(res.stderr) if res.returncode else first_line(out, p.look)
            rows.append({
                "probe": p.name, "exit": str(res.returncode),
                "said": said.replace("|", "\\|").replace("\x1b", "ESC"),
                "traceback": "yes" if "Traceback" in out else "no",
                "data": p.kept(d, res.stdout) if p.kept else "",
            })  # fmt: skip
            print(f"[probe] {p.name}: exit {res.returncode}", flush=True)
    return rows


MAKE_STORE = """
import sys
from gapwatch.store import open_store
st = open_store(f"sqlite:///{sys.argv[1]}")
sid = st.ensure_sweep("probe", "name: probe\\n")
rid = st.ensure_run(sid, "t", role="control", pair_key="p", seed=0, compression="none",
                    correction="none", config={})
st.write_steps(rid, [(s, {sys.argv[2]: 0.3}, {}) for s in (1, 2, 3)])
st.close()
"""


def make_store() -> None:
    """The one-run store the export probe copies, made with the probed checkout's code."""
    STORE.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(TREE)}
    subprocess.run([sys.executable, "-c", MAKE_STORE, str(STORE), SCORE], cwd=TREE, env=env,
                   check=True, capture_output=True)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="checkout whose code to probe")
    ap.add_argument("--label", default="after")
    ap.add_argument("--out", type=Path, help="also write the rows as JSON here")
    ap.add_argument("--before", type=Path, help="rows (--out JSON) of an older checkout: "
                    "print one before/after table")  # fmt: skip
    args = ap.parse_args()
    global TREE
    TREE = args.tree.resolve()
    make_store()
    try:
        rows = run(args.tree.resolve())
    finally:
        STORE.unlink(missing_ok=True)
    if args.out:
        args.out.write_text(json.dumps({"label": args.label, "rows": rows}, indent=1))
    if args.before:
        old = {r["probe"]: r for r in json.loads(args.before.read_text())["rows"]}
        print("| probe | before: exit, said, data | after: exit, said, data |")
        print("|---|---|---|")
        for r in rows:
            b = old.get(r["probe"], {"exit": "-", "said": "-", "data": ""})
            cell = [f"{x['exit']}: {x['said']}" + (f" ({x['data']})" if x["data"] else "")
                    for x in (b, r)]  # fmt: skip
            print(f"| {r['probe']} | {cell[0]} | {cell[1]} |")
        return 0
    print(f"| probe | exit ({args.label}) | first line ({args.label}) | traceback | data |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['probe']} | {r['exit']} | {r['said']} | {r['traceback']} | {r['data']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
