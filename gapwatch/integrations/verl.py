"""gapwatch's sliced gap diagnostics inside a verl run: see ``gapwatch.orchestrator.integrations.verl``.

Switched on by one Ray override (verl is imported only when ``install`` runs)::

    +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=gapwatch.integrations.verl.install
"""

from gapwatch.orchestrator.integrations.verl import gap_metrics, install, slices

__all__ = ["gap_metrics", "install", "slices"]
