"""Real multi-process gloo jobs with injected faults (demo and test fixtures).

The API is in :mod:`fr_otel.demo.gloo_job` (``run_scenario``, ``SCENARIOS``, ``Scenario``).
Nothing is re-exported here, so ``python -m fr_otel.demo.gloo_job`` runs without runpy's
"found in sys.modules" warning. Nothing here imports torch; only the rank processes do.
"""
