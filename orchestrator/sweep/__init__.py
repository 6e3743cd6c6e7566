"""gapwatch runs the experiment: paired sweeps on Ray Tune, and one run without Ray.

``gapwatch sweep CONFIG`` (``driver.run_sweep``): the YAML is validated and expanded into
trials (``config``: per seed a dense control first, then one treatment per compression and
correction), checked before launch (``preflight``, ``reach``), and run by a
``tune.Tuner``. Each trial is the built-in worker (``trainable``) or any trainer's command
whose log it follows (``command``); a trial whose node is lost is started again
(``attempts``, ``placement``). On the driver the ``monitor`` judges each step against its
control with the rules and stops a collapsing trial, the ``recorder`` writes everything to
the store through one ``writer``, and ``progress`` draws the live table.
``gapwatch run CONFIG`` (``local_run``) is one built-in run in this process.

May import: the shared modules of ``orchestrator`` (``rules``, ``readers``, ``tracked``,
``signals``, ``console``, ``errors``), ``orchestrator.watch`` by its top only (a command
trial follows its trainer's log the way ``gapwatch watch`` does), and the packages below
(``workers``, ``correction``, ``store``). Nothing here is imported by ``watch`` or
``integrations``; only ``orchestrator.cli`` imports these modules. This top imports none
of them, so ``gapwatch runs`` and a Tune trial import only what they use (Ray is imported
by ``driver`` alone).
"""
