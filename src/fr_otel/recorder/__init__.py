"""The in-rank recorder: ring buffer, incident detection and all-rank flush (not built yet)."""
