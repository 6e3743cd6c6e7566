"""The Monitor: a sweep's stop rules on the driver (a Ray Tune ``Stopper``).

Each trial is followed by one ``rules.Watcher`` (bounded state, whatever the number of
steps). A treatment's watcher also sees its paired control's steps: as the control's
results arrive in this driver, or, where the control ran elsewhere or earlier (a resumed
sweep), from the store, read when the watcher starts and again whenever the treatment has
got ahead of what is known (at most every ``control_refresh_s``). Every new warn/stop
decision goes to the Recorder, which stores it; a stop decision makes ``__call__`` return
True, and Tune ends that trial.

**A control that trips a stop rule voids its pair.** Its treatments then have no healthy
reference: a compressed run beside a dense one that cannot learn says nothing about the
compression or its correction. So the Monitor says so in a ``void_pair`` warning on the
control and stops each of its treatments at its next step with a ``void_pair`` stop
(``VOID_RULE``, the reason in its evidence), here or, in a resumed sweep, from the
control's stored stop; the compute goes to pairs that can still mean something.

**A trial taken up part way** (``--resume`` from a checkpoint, or Tune's retry after its
node was lost: ``orchestrator.sweep.attempts``) reports first a step after 1. Its watcher is
then rebuilt from the trial's stored steps before that one, so the rules judge it as if
it had never stopped, and its decisions about the next ``restore_grace`` steps are judged
but not acted on (a restart's spike is not a collapse). Each attempt opens with its
placement report, which drops what the Monitor knew of the earlier one.

**A trial taken up while the store is down** cannot have its stored steps read, and rules
started from nothing would judge it on the new attempt's steps alone (a collapse under
way before the restart seen late, a baseline taken from after it). So its decisions are
held: the steps it reports are kept, not judged, and the rebuild is tried again at each
of them; once the store answers (its backlog written), the watcher is rebuilt from the
stored steps and then judges the held ones in order, so its next decision is made with
the rules' whole state (a stop among them ends the trial then). Said in one line each
way. A store that never comes back leaves such a trial undecided, not misjudged.

Not here: the rules (``orchestrator.rules``), writing (``orchestrator.sweep.recorder``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ray.tune import Stopper

from gapwatch.orchestrator.console import console
from gapwatch.orchestrator.rules import Decision, RuleSet, Watcher
from gapwatch.orchestrator.sweep.attempts import new_attempt
from gapwatch.orchestrator.sweep.trainable import unpack
from gapwatch.orchestrator.tracked import ControlFeed
from gapwatch.store.identity import VOID_PAIR

if TYPE_CHECKING:
    from gapwatch.orchestrator.sweep.recorder import Recorder


VOID_RULE = VOID_PAIR
"""The decision that marks a pair void: a warning on the control, a stop on each treatment."""


def void_reason(seed: Any, rule: str, step: int) -> str:
    """The sentence a void pair is announced with, in the table, the summary and the store."""
    return (
        f"the dense control of seed {seed} stopped at step {step} by {rule}: "
        "its treatments have no healthy reference"
    )


@dataclass
class Followed:
    """One trial as the Monitor follows it."""

    watcher: Watcher
    control_key: str | None
    control: ControlFeed | None
    """Its control's steps from the store (None: a control, or no store)."""
    quiet_until: int = 0
    """Decisions about steps up to this one are not acted on (just after a restore); 0
    once past (or never restored)."""
    rebuild_from: int = 0
    """Taken up at this step while the store could not say what came before: its
    watcher waits for the store to be rebuilt; 0 once rebuilt (or never needed)."""
    held: list[dict[str, Any]] = field(default_factory=list)
    """Steps reported while the rebuild waits, judged once it is done."""

    @property
    def last_step(self) -> int | None:
        """The newest step reported (judged, or held)."""
        return int(self.held[-1]["step"]) if self.held else self.watcher.last_step


class Monitor(Stopper):
    """Apply the stop rules to every result; True stops that trial.

    ``specs`` are the trials' ``TrialSpec.to_dict()`` (for each treatment's control key).
    A trial whose first reported step is past 1 has its watcher rebuilt from its stored
    steps before it; where there were such steps, its decisions about the next
    ``restore_grace`` steps are judged but not acted on.
    """

    def __init__(
        self,
        ruleset: RuleSet,
        specs: Sequence[Mapping[str, Any]],
        recorder: Recorder | None = None,
        *,
        stopping: bool = True,
        control_refresh_s: float = 2.0,
        restore_grace: int = 2,
    ) -> None:
        self.ruleset = ruleset
        self.control_of = {str(s["trial_key"]): s.get("control_key") for s in specs}
        self.restore_grace = restore_grace
        self.recorder = recorder
        self.stopping = stopping
        self.control_refresh_s = control_refresh_s
        self.seed_of = {str(s["trial_key"]): s.get("seed") for s in specs}
        self.followed: dict[str, Followed] = {}
        self._treatments_of: defaultdict[str, list[str]] = defaultdict(list)
        self.voided: dict[str, Decision] = {}
        """Control key -> the stop that voided its pair."""
        self._looked_up: set[str] = set()
        self._void_sent: set[str] = set()

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        started = new_attempt(result)
        if started is not None:
            # a new attempt (a first start, or a retry on another node): judged afresh
            self.followed.pop(started, None)
            return False
        rep = unpack(result)
        # A result without our keys (Tune's own bookkeeping) decides nothing
        if rep is None or not self.stopping:
            return False
        f = self.followed.get(rep.key)
        last = None if f is None else f.last_step
        # Tune hands a finished trial's last result over once more: nothing new
        if last is not None and rep.step == last:
            return False
        # A trial restarted re-sends steps: its rules start over from what is stored
        if f is None or (last is not None and rep.step < last):
            f = self._follow(rep.key, rep.step)
        row = {"step": rep.step, **rep.metrics}
        void = self._void(rep.key, rep.step)
        if void is not None:
            if self.recorder is not None and rep.key not in self._void_sent:
                self.recorder.add_decision(rep.key, void)
            self._void_sent.add(rep.key)
            return True
        if f.rebuild_from:
            stop = self._held(rep.key, f, row)
        else:
            self._feed_control(rep.key, f, rep.step)
            stop = self._judge(rep.key, f, row)
        self._pass_to_treatments(rep.key, row)
        return stop

    def _held(self, key: str, f: Followed, row: dict[str, Any]) -> bool:
        """A step of a trial whose rules wait for the store: held until the rebuild can
        be done, then every held step judged in order (True at a stop)."""
        f.held.append(row)
        if not self._rebuild(key, f):
            if len(f.held) == 1:
                console().print(
                    f"{key}: taken up at step {f.rebuild_from} while the store cannot be "
                    "reached; its rules wait for the store to see the steps before, its "
                    "decisions are held until then",
                    markup=False,
                )
            return False
        rows, f.held = f.held, []
        if len(rows) > 1:
            console().print(
                f"{key}: the store is back; its rules rebuilt from the stored steps, then "
                f"judged its {len(rows) - 1} held steps",
                markup=False,
            )
        for r in rows:
            self._feed_control(key, f, int(r["step"]))
            if self._judge(key, f, r):
                return True
        return False

    def _follow(self, key: str, first: int) -> Followed:
        """Follow trial ``key`` from its step ``first``: its watcher sees the trial's
        stored steps before it first (a trial taken up part way)."""
        ck, feed = self.control_of.get(key), None
        if ck is not None and self.recorder is not None:
            rec = self.recorder
            feed = ControlFeed(
                lambda after, until, names: rec.stored_history(
                    ck, after=after, until=until, names=names
                ),
                self.control_refresh_s,
            )
        f = Followed(self.ruleset.watch(), ck, feed)
        self.followed[key] = f
        if f.control_key is not None and key not in self._treatments_of[f.control_key]:
            self._treatments_of[f.control_key].append(key)
        if first > 1 and self.recorder is not None:
            # taken up from a checkpoint: the rules see the steps stored before it again
            f.rebuild_from = first  # done with its first step (``_held``)
        return f

    def _rebuild(self, key: str, f: Followed) -> bool:
        """Feed ``f``'s watcher the trial's stored steps before ``f.rebuild_from``; False
        (nothing fed) while the store cannot say what they are."""
        assert self.recorder is not None
        first = f.rebuild_from
        rows = self.recorder.stored_steps(key, after=0, until=first - 1)
        if rows is None:
            return False
        for row in rows:
            self._feed_control(key, f, int(row["step"]))
            f.watcher.step(row)
        if rows:  # (a log that starts past step 1 is not a restart)
            f.quiet_until = first - 1 + self.restore_grace
        f.rebuild_from = 0
        return True

    def _judge(self, key: str, f: Followed, row: dict[str, Any]) -> bool:
        new = f.watcher.step(row)
        if row["step"] <= f.quiet_until:
            return False  # just after a restore: a restart's spike is not acted on
        if f.quiet_until > 0:
            # the first step past the grace: what the rules hold now is new to us, so a
            # decision that began within the grace and still holds is acted on, not lost
            f.quiet_until = 0
            held = [d for d in f.watcher.last.values() if d.action != "continue"]
            new = sorted(held, key=lambda d: d.action != "stop")
            if new and new[0].action == "stop":
                f.watcher.first_stop = new[0]
        if self.recorder is not None:
            for d in new:
                self.recorder.add_decision(key, d)
        stop = bool(new) and new[0].action == "stop"
        if stop and self.control_of.get(key) is None:
            self._void_pair(key, new[0])
        return stop

    def _void_pair(self, control: str, stop: Decision) -> None:
        """A control stopped: its pair is void, said on the control itself."""
        self.voided[control] = stop
        if self.recorder is not None:
            reason = void_reason(self.seed_of.get(control), stop.rule, stop.step)
            self.recorder.add_decision(
                control, Decision("warn", VOID_RULE, stop.step, {"reason": reason})
            )

    def _void(self, key: str, step: int) -> Decision | None:
        """The ``void_pair`` stop for treatment ``key`` at ``step``, if its control stopped
        (in this driver, or, looked up once, in the store from an earlier one)."""
        ck = self.control_of.get(key)
        if ck is None:
            return None
        stop = self.voided.get(ck)
        if stop is None and self.recorder is not None and ck not in self._looked_up:
            self._looked_up.add(ck)
            stop = self.recorder.stored_stop(ck)
            if stop is not None:
                self.voided[ck] = stop
        if stop is None:
            return None
        reason = void_reason(self.seed_of.get(ck), stop.rule, stop.step)
        evidence = {"reason": reason, "control": ck, "control_rule": stop.rule,
                    "control_step": stop.step}  # fmt: skip
        return Decision("stop", VOID_RULE, step, evidence)

    def _pass_to_treatments(self, key: str, row: dict[str, Any]) -> None:
        """A control's step goes to the watchers of its treatments running here."""
        for t in self._treatments_of.get(key, ()):
            f = self.followed.get(t)
            if f is None:  # between two attempts of the treatment
                continue
            if f.control is not None:
                f.control.live = True
                f.control.give(f.watcher, row)
            else:
                f.watcher.control(row)

    def _feed_control(self, key: str, f: Followed, step: int) -> None:
        """Catch the watcher up on its control's stored steps (see ``ControlFeed``)."""
        if f.control is not None:
            f.control.catch_up(f.watcher, step)

    def first_stop(self, key: str) -> Decision | None:
        """The stop decision that ended trial ``key`` in this driver, if any."""
        f = self.followed.get(key)
        return None if f is None else f.watcher.first_stop

    def stop_all(self) -> bool:
        return False
