"""A run someone else trains: follow its log, put it in the store, stop it by the rules.

``gapwatch watch LOG`` (``single.watch``) follows one log as the trainer writes it
(``follow``: growth, half-written lines, rotation), reads each step the one way every
path does (``logs``: the formats of ``orchestrator.readers``, steps in order, foreign
names mapped onto gapwatch's by ``NameMapper``), and on the first stop ends the trainer
(``process``: its process group, SIGKILL after a grace; a sweep's command trial ends its
trainer the same way) or runs a command. A glob, ``--layout`` or ``--manifest`` follows a
fleet of runs (``fleet``; its layout file: ``fleet_layout``). ``gapwatch replay LOG`` runs
the rules over a finished log (``replay``); ``gapwatch names LOG`` says how a log is read
(``names_report``).

May import: the shared modules of ``orchestrator`` and the packages below; never
``orchestrator.sweep`` or ``orchestrator.integrations``. They import this package by its
top only, which gives what they use (below) and imports neither the store nor Ray.
"""

from gapwatch.orchestrator.watch.follow import FOLLOW_FORMATS, LogFollower, Step
from gapwatch.orchestrator.watch.logs import LogError, NameMapper, ReadOptions, open_log, read_log
from gapwatch.orchestrator.watch.process import end_process_group, hung_line

__all__ = [
    "FOLLOW_FORMATS",
    "LogError",
    "LogFollower",
    "NameMapper",
    "ReadOptions",
    "Step",
    "end_process_group",
    "hung_line",
    "open_log",
    "read_log",
]
