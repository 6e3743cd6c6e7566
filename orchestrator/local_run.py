"""``gapwatch run CONFIG``: one RL run in this process, recorded in the store.

``run_local(path, db_url=..., overrides=["steps=5", "compression_kwargs.bits=2"])`` loads the
run YAML into ``workers.RunConfig`` (overrides are YAML-typed; a dotted key sets one entry
of a dict field), opens the store, creates the run row (no sweep; role ``control`` when
the codec is ``none`` else ``treatment``; the pair key a control shares with its
treatments), writes every step as it comes with a rich progress bar (step, score, gap),
and marks the run completed, stopped (by a rule) or failed (with a one-line error; the
steps already written are kept).

Stop rules enter through one seam, :func:`rule_hook` (history -> decisions): the same
``orchestrator.rules`` RuleSet the sweep's Monitor applies, with the YAML's ``rules:``
section and, for a treatment, its stored control's history.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from correction import names as N

LOCAL_SWEEP = "local"
"""Name of the sweep that holds every run started by ``gapwatch run``."""
History = list[dict[str, Any]]
RuleHook = Callable[[History], list[Any]]
"""history (oldest first, ``{"step": n, name: value}``) -> decisions with ``.action``
(continue|warn|stop), ``.rule``, ``.step``, ``.evidence``."""


def rule_hook(ruleset: Any | None, control: History | None = None) -> RuleHook | None:
    """The stop rules as ``history -> decisions``, or None to apply none.

    ``ruleset`` is ``orchestrator.rules.build`` of the run YAML's ``rules:`` section (same
    form as a sweep's), or None; ``control`` the paired control's stored history, so rules
    that compare with the control (``score_collapse``'s margin, ``gap_vs_control``) work
    for a treatment run started after its control.
    """
    if ruleset is None:
        return None
    return lambda history: ruleset.evaluate(history, control)


def _control_history(st: Any, sweep_id: int, pair_key: str, role: str) -> History | None:
    """The latest stored control run with this pair key (None for a control itself)."""
    if role == "control":
        return None
    controls = [
        r
        for r in st.runs(sweep_id)
        if r.role == "control" and r.pair_key == pair_key and (r.last_step or 0) > 0
    ]
    if not controls:
        return None
    return list(st.history(max(controls, key=lambda r: r.id).id))


def load_run_config(path: Path | str, overrides: list[str]) -> Any:
    """Read the run YAML, apply ``key=value`` overrides, validate into a ``RunConfig``."""
    return _load(path, overrides)[0]


def _load(path: Path | str, overrides: list[str]) -> tuple[Any, dict[str, Any] | None]:
    """``(RunConfig, rules settings)`` from the run YAML plus ``key=value`` overrides."""
    from workers import RunConfig

    p = Path(path)
    if not p.is_file():
        raise ValueError(
            f"run config {str(p)!r} not found; pass a YAML file such as examples/run-dense.yaml"
        )
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(
            f"run config {str(p)!r} is not valid YAML: {' '.join(str(exc).split())}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"run config {str(p)!r} must be a mapping of field: value")
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects key=value (e.g. --set steps=5), got {item!r}")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        head, dot, sub = key.strip().partition(".")
        if dot:
            inner = data.get(head) or {}
            if not isinstance(inner, dict):
                raise ValueError(f"--set {key}: field {head!r} is not a mapping")
            data[head] = {**inner, sub: value}
        else:
            data[head] = value
    rules_settings = data.pop("rules", None)
    if rules_settings is not None and not isinstance(rules_settings, dict):
        raise ValueError(
            f"run config {str(p)!r}: `rules:` must map rule names to settings, "
            "e.g. rules: {score_collapse: {k: 3}}"
        )
    return RunConfig.from_dict(data), rules_settings


def run_local(
    config_path: Path | str,
    *,
    db_url: str | None = None,
    overrides: list[str] | None = None,
    apply_rules: bool = True,
) -> int:
    """Run one config end to end into the store; return the run id."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from store import open_store
    from workers import train

    cfg, rules_settings = _load(config_path, overrides or [])
    from orchestrator import rules

    # built (and so validated) before any work starts
    ruleset = rules.build(rules_settings) if apply_rules else None
    st = open_store(db_url)
    # Runs started here belong to one pseudo-sweep, LOCAL_SWEEP (the store needs a sweep).
    sweep_id = st.ensure_sweep(LOCAL_SWEEP, "runs started with `gapwatch run CONFIG`")
    run_id = st.ensure_run(
        sweep_id,
        cfg.trial_id(),
        role=cfg.role,
        pair_key=cfg.pair_key(),
        seed=cfg.seed,
        compression=_codec_label(cfg),
        correction=cfg.correction,
        config=cfg.to_dict(),
        status="running",
    )
    control = _control_history(st, sweep_id, cfg.pair_key(), cfg.role)
    hook = rule_hook(ruleset, control)
    history: History = []
    status, stop_rule, stop_step = "completed", None, None
    columns = (
        TextColumn(f"[bold]{cfg.name}[/] {cfg.role}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    try:
        with Progress(*columns, transient=False) as bar:
            task = bar.add_task("steps", total=cfg.steps, info="warming up")
            for res in train(cfg):
                st.write_steps(run_id, [(res.step, res.metrics, res.distributions)])
                history.append({"step": res.step, **res.metrics})
                m = res.metrics
                info = (
                    f"score {m[N.SCORE_MEAN]:+.3f}  gap {m.get(N.PROBS_DIFF_MEAN, float('nan')):.4f}"
                    f"  clip {m[N.CLIP_RATIO]:.2f}"
                )
                bar.update(task, completed=res.step, info=info)
                decision = _apply(hook, st, run_id, history)
                if decision is not None:
                    status, stop_rule, stop_step = "stopped", decision.rule, decision.step
                    break
    except BaseException as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, KeyboardInterrupt):
            msg = "interrupted"
        st.set_run_status(run_id, "failed", error=msg)
        raise
    st.set_run_status(run_id, status, stop_rule=stop_rule, stop_step=stop_step)
    where = f" (stopped by {stop_rule} at step {stop_step})" if stop_rule else ""
    print(f"run {run_id} {status}{where}: {len(history)} steps in {st.url_display}")
    return int(run_id)


def _codec_label(cfg: Any) -> str:
    """``none``, ``quant:bits=2``, ``topk:keep=0.05`` (plus ``@every2`` for every n-th layer)."""
    if cfg.compression == "none":
        return "none"
    kw = ",".join(f"{k}={v}" for k, v in sorted(cfg.compression_kwargs.items()))
    label = f"{cfg.compression}:{kw}" if kw else cfg.compression
    if cfg.compression_layers != "all":
        label += f"@every{cfg.compression_layers}"
    return label


def _apply(hook: RuleHook | None, st: Any, run_id: int, history: History) -> Any:
    """Record the hook's warn/stop decisions; return the first stop, or None."""
    if hook is None:
        return None
    stop = None
    for d in hook(history):
        if d.action == "continue":
            continue
        st.write_decision(run_id, d.step, d.rule, d.action, dict(d.evidence))
        if d.action == "stop" and stop is None:
            stop = d
    return stop
