"""The live check: ``fr-otel run``'s node agent, which compares the heads of this host's
ranks while the job runs and names a desync's culprit in seconds (``LiveCheck``); see
docs/live-diagnosis.md.

``heads`` reads each rank's rings as they grow, ``compare`` is the cheap pre-check over
them, ``confirm`` asks the analyzer on a snapshot of the rings, ``verdict`` is what comes
out (its line and its JSON record), ``declare`` the incident and the job's end that follow,
and ``agent`` the thread that runs them.
"""
