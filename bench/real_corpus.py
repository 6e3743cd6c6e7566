"""The corpus of real GRPO/PPO training logs: rebuild its files, or list it.

    .venv/bin/python bench/real_corpus.py            # download what is missing (needs network)
    .venv/bin/python bench/real_corpus.py --list     # the runs, their labels and onset windows
    .venv/bin/python bench/real_corpus.py --check    # verify the files present (no network)
    .venv/bin/python bench/real_corpus.py --only ID [--only ID ...]
    .venv/bin/python bench/real_corpus.py --from-git DIR [--from-git DIR ...]   # no network
    .venv/bin/python bench/real_corpus.py --ship --from-git DIR   # commit the licensed ones
    .venv/bin/python bench/real_corpus.py --criterion FILE   # a log's criterion figures

``bench/data/real/manifest.yaml`` records, for every run, the public GitHub repository,
the commit, the path(s) in that repository, the licence, the sha256 of each file as its
trainer (or notebook) wrote it, and the label decided from the curves by the written
criterion at the top of the manifest.

A run whose manifest licence allows redistribution (any licence but ``none ...``) is
committed, its files byte for byte under ``bench/data/real/shipped/<id>/<file name>``
with its repository's licence in ``shipped/LICENSES/`` and a table of sources in
``shipped/README.md`` (all three written by ``--ship``). The other files are not committed
(``bench/data/real/files/`` is git-ignored): their repositories carry no licence that
allows it. This script fetches each file not shipped from
``https://raw.githubusercontent.com/<owner>/<repo>/<commit>/<path>`` into
``bench/data/real/files/<id>/<file name>``, byte for byte, skips a file already present
with the recorded sha256, and refuses (exit 1) a download whose sha256 differs. It needs
network access to raw.githubusercontent.com; nothing else does. :func:`locate` finds a
file wherever it is.

``--from-git DIR`` takes each file from a local clone instead (``git show
<commit>:<path>``), with the same sha256 check, and downloads nothing. DIR is either a
clone (working tree or bare) of a corpus repository, used for the runs whose commit it
holds, or a folder of clones named ``owner+name`` (or ``owner__name``), each being the
clone itself or holding it one level down; repeat the option for several. A run found in
none of them is reported and counted as a failure.

``--ship`` copies the files of every run whose licence allows redistribution from
``files/`` (sha256 checked) to ``shipped/``, writes each repository's licence file at the
run's commit (and its NOTICE file, where it has one) to
``shipped/LICENSES/<owner>+<name>.txt`` (``.NOTICE.txt``), taken from the clones given by
``--from-git`` (a licence already there is kept without them), and rewrites
``shipped/README.md``.

``--criterion FILE`` prints, for a log about to be labelled, the quantities the
manifest's written criterion reads (the reward's quarter t-statistic, the zero-variance
shares of the run and of its first 20 trainer steps, the share of steps at the length
cap), computed from the file as gapwatch's reader yields it and before any rule is run:
what a new entry's ``criterion:`` block records.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REAL = HERE / "data" / "real"
MANIFEST = REAL / "manifest.yaml"
FILES = REAL / "files"
SHIPPED = REAL / "shipped"
LICENSES = SHIPPED / "LICENSES"
RAW = "https://raw.githubusercontent.com/{project}/{commit}/{path}"
GITHUB = "https://github.com/{project}"


def load_manifest(path: Path = MANIFEST) -> dict:
    try:
        import yaml
    except ImportError:  # pragma: no cover - the project's venv has PyYAML
        sys.exit("real_corpus: PyYAML is needed to read the manifest (pip install pyyaml)")
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def raw_url(run: dict, entry: dict) -> str:
    return RAW.format(
        project=run["project"],
        commit=run["commit"],
        path=urllib.parse.quote(entry["path"], safe="/()"),
    )


def local_path(entry: dict, root: Path = FILES) -> Path:
    return root / entry["local"]


def locate(local: str, real: Path = REAL) -> Path | None:
    """The corpus file ``local`` (a manifest entry's ``local``): its shipped copy, else the
    fetched one, else None."""
    for path in (real / "shipped" / local, real / "files" / local):
        if path.is_file():
            return path
    return None


def redistributable(run: dict) -> bool:
    """Whether the run's licence allows its files to be committed here (the manifest says
    ``none ...`` for a repository without a licence)."""
    return not run["licence"].startswith("none")


def fetch(url: str, attempts: int = 3, timeout: float = 60.0) -> bytes:
    last: Exception | None = None
    for attempt in range(attempts):
        try:
            req = urllib.request.Request(url, headers={"User-Agent": "gapwatch-real-corpus"})
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.read()
        except Exception as exc:  # network errors are retried, then reported
            last = exc
            time.sleep(2 * (attempt + 1))
    raise RuntimeError(f"{url}: {last}")


def is_git_dir(path: Path) -> bool:
    """Whether ``path`` is the top of a clone (working tree or bare)."""
    if not path.is_dir():
        return False
    if (path / ".git").exists():
        return True
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def clones_in(dirs: list[Path]) -> tuple[dict[str, Path], list[Path]]:
    """The clones under ``dirs``: those named ``owner+name`` (or ``owner__name``) by their
    project, lowercased, and the DIRs that are clones themselves (tried for any run)."""
    named: dict[str, Path] = {}
    loose: list[Path] = []
    for top in dirs:
        if is_git_dir(top):
            loose.append(top)
            continue
        if not top.is_dir():
            sys.exit(f"real_corpus: --from-git {top}: not a folder")
        for sub in sorted(top.iterdir()):
            sep = "+" if "+" in sub.name else "__" if "__" in sub.name else None
            if sep is None or not sub.is_dir():
                continue
            project = sub.name.replace(sep, "/", 1).lower()
            inner = (
                [sub] if is_git_dir(sub) else [c for c in sorted(sub.iterdir()) if is_git_dir(c)]
            )
            if inner:
                named.setdefault(project, inner[0])
    return named, loose


def git_show(repo: Path, commit: str, path: str) -> bytes | None:
    """The file at ``commit:path`` in the clone ``repo``, or None where it is not there."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True, check=False
    )
    return proc.stdout if proc.returncode == 0 else None


def from_git(run: dict, entry: dict, clones: tuple[dict[str, Path], list[Path]]) -> bytes:
    named, loose = clones
    repos = ([named[run["project"].lower()]] if run["project"].lower() in named else []) + loose
    for repo in repos:
        data = git_show(repo, run["commit"], entry["path"])
        if data is not None:
            return data
    if not repos:
        raise RuntimeError(f"no local clone of {run['project']}")
    raise RuntimeError(
        f"{run['commit'][:12]}:{entry['path']} is in no local clone of {run['project']}"
    )


def rebuild(
    runs: list[dict],
    root: Path = FILES,
    clones: tuple[dict[str, Path], list[Path]] | None = None,
) -> int:
    """Fetch every missing file (from the local ``clones`` where given, else by download);
    return the number of failures."""
    failures = 0
    for run in runs:
        for entry in run["files"]:
            dest = local_path(entry, root)
            if dest.exists() and sha256_of(dest) == entry["sha256"]:
                print(f"ok       {entry['local']}")
                continue
            shipped = SHIPPED / entry["local"]
            if shipped.exists() and sha256_of(shipped) == entry["sha256"]:
                print(f"shipped  {entry['local']}")
                continue
            try:
                data = (
                    from_git(run, entry, clones)
                    if clones is not None
                    else fetch(raw_url(run, entry))
                )
            except RuntimeError as exc:
                print(f"FAILED   {entry['local']}: {exc}")
                failures += 1
                continue
            got = hashlib.sha256(data).hexdigest()
            if got != entry["sha256"]:
                print(f"MISMATCH {entry['local']}: sha256 {got}, manifest {entry['sha256']}")
                failures += 1
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + ".part")
            tmp.write_bytes(data)
            tmp.replace(dest)
            print(f"fetched  {entry['local']} ({len(data)} bytes)")
    return failures


def check(runs: list[dict], root: Path = FILES) -> int:
    """Verify the files present, shipped and fetched; return the number missing or wrong."""
    bad, found = 0, {"shipped": 0, "fetched": 0}
    for run in runs:
        for entry in run["files"]:
            copies = {"shipped": SHIPPED / entry["local"], "fetched": local_path(entry, root)}
            copies = {k: p for k, p in copies.items() if p.exists()}
            if not copies:
                print(f"missing  {entry['local']}")
                bad += 1
            for kind, dest in copies.items():
                ok = sha256_of(dest) == entry["sha256"]
                print(f"{'ok' if ok else 'WRONG':8} {kind}/{entry['local']}")
                bad += not ok
                found[kind] += ok
    print(f"{found['shipped']} shipped, {found['fetched']} fetched, {bad} missing or wrong")
    return bad


LEGAL = {".txt": ("LICENSE", "LICENCE", "COPYING"), ".NOTICE.txt": ("NOTICE",)}
"""The files kept with a shipped run (by the suffix they get in ``LICENSES/``): its
repository's licence, and its NOTICE file where it has one (Apache-2.0 asks for both)."""


def legal_texts(run: dict, clones: tuple[dict[str, Path], list[Path]]) -> dict[str, bytes]:
    """The licence (and NOTICE) file at the top of the run's repository at its commit, from
    a local clone, by their ``LEGAL`` suffix; empty where no clone holds the commit."""
    named, loose = clones
    project = run["project"].lower()
    for repo in ([named[project]] if project in named else []) + loose:
        proc = subprocess.run(
            ["git", "-C", str(repo), "ls-tree", "--name-only", run["commit"]],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            continue
        texts: dict[str, bytes] = {}
        for suffix, prefixes in LEGAL.items():
            names = sorted(n for n in proc.stdout.splitlines() if n.upper().startswith(prefixes))
            data = git_show(repo, run["commit"], names[0]) if names else None
            if data is not None:
                texts[suffix] = data
        return texts
    return {}


def ship(
    runs: list[dict],
    root: Path = FILES,
    clones: tuple[dict[str, Path], list[Path]] | None = None,
) -> int:
    """Copy the files of the runs whose licence allows it from ``root`` to ``SHIPPED`` (a
    file already there with the recorded sha256 is kept), and write their repositories'
    licences from the local ``clones``; return the number of failures."""
    failures = 0
    texts: dict[str, dict[str, bytes]] = {}  # owner+name -> LEGAL suffix -> text
    for run in filter(redistributable, runs):
        key = run["project"].replace("/", "+")
        if clones is None:  # the licence written by an earlier --ship
            legal, found = {}, (LICENSES / f"{key}.txt").exists()
        else:
            legal = legal_texts(run, clones)
            found = ".txt" in legal
        if not found:
            print(f"FAILED   {run['id']}: no licence file of {key} at {run['commit'][:12]}")
            failures += 1
            continue
        if legal and texts.setdefault(key, legal) != legal:
            print(f"FAILED   {run['id']}: its licence differs from another commit's of {key}")
            failures += 1
            continue
        for entry in run["files"]:
            dest, src = SHIPPED / entry["local"], local_path(entry, root)
            if dest.exists() and sha256_of(dest) == entry["sha256"]:
                print(f"ok       {entry['local']}")
            elif src.exists() and sha256_of(src) == entry["sha256"]:
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(src.read_bytes())
                print(f"shipped  {entry['local']}")
            else:
                print(f"FAILED   {entry['local']}: not fetched with the recorded sha256")
                failures += 1
    LICENSES.mkdir(parents=True, exist_ok=True)
    for key, legal in texts.items():
        for suffix, data in legal.items():
            (LICENSES / f"{key}{suffix}").write_bytes(data)
    return failures


def shipped_readme(runs: list[dict]) -> str:
    """``shipped/README.md``: the rule, and where each shipped file was taken from."""
    shipped = [
        (run, entry)
        for run in filter(redistributable, runs)
        for entry in run["files"]
        if (SHIPPED / entry["local"]).exists()
    ]
    licences = sorted({run["licence"] for run, _ in shipped})
    lines = [
        "# The shipped part of the corpus of public runs",
        "",
        "The files of the corpus runs (`../manifest.yaml`) whose licence allows",
        "redistribution, as their trainers (or notebooks) wrote them, each under",
        "`<run id>/<file name>` as the manifest's `local` names it. A run is shipped when the",
        "licence its manifest entry records is not `none ...`: its repository has a licence",
        f"file at the recorded commit ({', '.join(licences)} here). Each file is unchanged, byte",
        "for byte, taken from the repository at the recorded commit, and has the sha256 the",
        "manifest records. Each repository's licence file at that commit is in `LICENSES/`",
        "(with its NOTICE file, where it has one); the copyright in these files stays with",
        "their authors. The other runs' files are not here: `python bench/real_corpus.py`",
        "fetches them into `../files/` (git-ignored).",
        "",
        f"{len(shipped)} files of {len({run['id'] for run, _ in shipped})} runs from "
        f"{len({run['project'] for run, _ in shipped})} repositories. Written by "
        "`python bench/real_corpus.py --ship`; not edited by hand.",
        "",
        "| run | repository | commit | path in the repository | licence | licence file here |",
        "|---|---|---|---|---|---|",
    ]
    for run, entry in shipped:
        repo = GITHUB.format(project=run["project"])
        blob = f"{repo}/blob/{run['commit']}/{urllib.parse.quote(entry['path'])}"
        key = run["project"].replace("/", "+")
        legal = [f"`LICENSES/{key}{s}`" for s in LEGAL if (LICENSES / f"{key}{s}").exists()]
        lines.append(
            f"| `{run['id']}` | [{run['project']}]({repo}) | `{run['commit']}` "
            f"| [`{entry['path']}`]({blob}) | {run['licence']} | {', '.join(legal)} |"
        )
    return "\n".join(lines) + "\n"


def listing(manifest: dict, runs: list[dict], root: Path = FILES) -> str:
    head = (
        "id",
        "project",
        "format",
        "steps",
        "every",
        "reward seen",
        "label",
        "onset",
        "signal",
        "?",
        "file",
    )
    rows = [head]
    for run in runs:
        shipped = all((SHIPPED / e["local"]).exists() for e in run["files"])
        present = shipped or all(local_path(e, root).exists() for e in run["files"])
        onset = run.get("onset")
        every = run.get("logging_interval")
        rows.append(
            (
                run["id"],
                run["project"],
                run["format"],
                f"{run['steps'][0]}-{run['steps'][1]}",
                str(every),
                f"[{run['reward_seen'][0]:g}, {run['reward_seen'][1]:g}]",
                run["label"],
                f"{onset[0]}-{onset[1]}" if onset else "",
                run.get("signal") or "",
                "yes" if run.get("uncertain") else "",
                "shipped" if shipped else "present" if present else "absent",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    labels: dict[str, int] = {}
    formats: dict[str, int] = {}
    for run in runs:
        labels[run["label"]] = labels.get(run["label"], 0) + 1
        formats[run["format"]] = formats.get(run["format"], 0) + 1
    projects = {run["project"] for run in runs}
    lines.append("")
    lines.append(
        f"{len(runs)} runs from {len(projects)} repositories; labels "
        + ", ".join(f"{k} {v}" for k, v in sorted(labels.items()))
        + "; formats "
        + ", ".join(f"{k} {v}" for k, v in sorted(formats.items()))
    )
    return "\n".join(lines)


def criterion(path: Path) -> dict:
    """The manifest criterion's quantities for the log at ``path`` (see the module
    docstring): read as gapwatch reads it, names mapped, no rule run."""
    import statistics

    sys.path.insert(0, str(HERE.parent))
    from gapwatch.correction import names as N
    from gapwatch.orchestrator.watch.logs import NameMapper, read_log

    mapper = NameMapper()
    rows = [mapper(r) for r in read_log(path).rows]

    def val(r: dict, name: str) -> float | None:
        v = r.get(name)
        return float(v) if isinstance(v, int | float) and v == v else None

    scored = [(int(r["step"]), v) for r in rows if (v := val(r, N.SCORE_MEAN)) is not None]
    steps = [s for s, _ in scored]
    q = max(len(scored) // 4, 1)
    first, last = [v for _, v in scored[:q]], [v for _, v in scored[-q:]]
    pooled = (
        ((statistics.pvariance(first) + statistics.pvariance(last)) / 2) ** 0.5 if q > 1 else 0.0
    )
    diff = statistics.fmean(last) - statistics.fmean(first)
    t = diff / (pooled * (2 / q) ** 0.5) if pooled > 0 else (0.0 if diff == 0 else float("inf"))

    def zero(r: dict) -> bool | None:
        f, sd = val(r, N.ZERO_ADV_FRAC), val(r, N.SCORE_STD)
        if f is not None:
            return f >= 0.95
        return None if sd is None else sd == 0

    zv = [(int(r["step"]), z) for r in rows if (z := zero(r)) is not None]
    start = int(rows[0]["step"])
    head = [z for s, z in zv if s < start + 20]
    clips = [(int(r["step"]), c) for r in rows if (c := val(r, N.CLIP_RATIO)) is not None]
    diffs = sorted(b - a for a, b in zip(steps, steps[1:], strict=False))
    return {
        "source": mapper.source,
        "steps": [steps[0], steps[-1]] if steps else None,
        "rows": len(rows),
        "logging_interval": diffs[len(diffs) // 2] if diffs else None,
        "reward_seen": [min(v for _, v in scored), max(v for _, v in scored)] if scored else None,
        "t": round(t, 2),
        "quarter_rows": q,
        "first_quarter_mean": round(statistics.fmean(first), 4),
        "last_quarter_mean": round(statistics.fmean(last), 4),
        "zero_variance_share": round(sum(z for _, z in zv) / len(zv), 3) if zv else None,
        "zero_variance_first20": round(sum(head) / len(head), 3) if head else None,
        "clip_at_cap_share": (
            round(sum(c >= 0.5 for _, c in clips) / len(clips), 3) if clips else None
        ),  # fmt: skip
        "clip_at_cap_first20": (
            round(
                sum(c >= 0.5 for s, c in clips if s < start + 20)
                / max(sum(1 for s, _ in clips if s < start + 20), 1),
                3,
            )
            if clips
            else None
        ),  # fmt: skip
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the corpus with labels and exit")
    ap.add_argument("--check", action="store_true", help="verify the files present; no network")
    ap.add_argument(
        "--only", action="append", default=[], metavar="ID", help="limit to these run ids"
    )
    ap.add_argument(
        "--from-git",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="take the files from local clones (a clone, or a folder of clones named "
        "owner+name) instead of downloading; repeatable",
    )
    ap.add_argument(
        "--ship",
        action="store_true",
        help="copy the fetched files whose licence allows it to bench/data/real/shipped/ "
        "(committed), with their licences (from the --from-git clones) and a README",
    )
    ap.add_argument(
        "--criterion", type=Path, metavar="FILE",
        help="print the manifest criterion's figures for a log (to label it) and exit",
    )  # fmt: skip
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    ap.add_argument(
        "--dest", type=Path, default=FILES, help="where the files go (default: %(default)s)"
    )
    args = ap.parse_args(argv)
    if args.criterion is not None:
        import yaml

        print(yaml.safe_dump(criterion(args.criterion), sort_keys=False), end="")
        return 0

    manifest = load_manifest(args.manifest)
    runs = manifest["runs"]
    if args.only:
        unknown = set(args.only) - {r["id"] for r in runs}
        if unknown:
            ap.error(f"unknown run id(s): {', '.join(sorted(unknown))}")
        runs = [r for r in runs if r["id"] in set(args.only)]
    if args.list:
        print(listing(manifest, runs, args.dest))
        return 0
    if args.check:
        return 1 if check(runs, args.dest) else 0
    clones = clones_in(args.from_git) if args.from_git else None
    if args.ship:
        failures = ship(runs, args.dest, clones)
        (SHIPPED / "README.md").write_text(shipped_readme(manifest["runs"]), encoding="utf-8")
        return 1 if failures else 0
    return 1 if rebuild(runs, args.dest, clones) else 0


if __name__ == "__main__":
    sys.exit(main())
