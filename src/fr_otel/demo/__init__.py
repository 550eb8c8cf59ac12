"""Real multi-process gloo jobs with injected faults (demo and test fixtures)."""
