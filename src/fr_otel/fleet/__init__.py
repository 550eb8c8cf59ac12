"""The fleet: every incident of an archive at once, by host, to tell which nodes to drain.

``facts`` reduces each incident to two small tables kept in the archive (``_fleet/``): one
row per rank (where it ran, and whether the analysis named it culprit, straggler or
waiting) and its collectives' latency, aggregated. ``views`` defines the fleet views over
them (``analysis/sql/fleet_*.sql``), in SQL that DuckDB and Spark SQL both run.
``simulated`` writes a fleet's archive with planted bad hosts (``fr-otel simulate
--incidents``).
"""
