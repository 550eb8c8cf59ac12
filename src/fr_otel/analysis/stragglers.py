"""Stragglers: ranks that are consistently late to their groups' collectives.

A job that is slow but not stuck runs at the pace of its slowest rank. Flight Recorder
holds the evidence: per collective, when each member issued it (``time_created_ns``) and,
with NCCL timing, how long each member's kernel ran (``duration_ms``).

*Arrival lateness* (the ``arrival`` relation, one row per rank per completed collective):
how long after the group's first member a member arrived. Where every member of a
collective has a GPU duration, arrival is the kernel's start: the kernel of every member
ends at the same moment, so a member that started later ran for less time, and
``longest duration - own duration`` is its lateness, free of clock offsets (NCCL's own
``time_discovered_started_ns`` is the watchdog's discovery, up to a poll interval late,
too coarse for milliseconds). Elsewhere arrival is the issue time, corrected by the
rank's clock offset (``clocks``).

*Stragglers*: per group and call site (a step calls each site once or a fixed number of
times, so a rank slow before one particular collective is late there every time, and
only there), a member is named when it is late there consistently: later than the mean
of the collective's members but the latest in at least ``CONSISTENCY`` of the cases (a
binomial test against chance gives the confidence), by a median margin over the site's
typical member of at least ``MIN_EXCESS_NS`` and of ``CLOCK_MARGIN`` times the clock
uncertainty. Jitter makes every rank late some of the time, so a healthy job names nobody.

The cases must also be separate *occasions*: a site's collectives close together in time
(FSDP's all-gathers of one step's layers, issued from one line) share whatever held a
rank up then (a busy core, a page fault, a log line), so a rank slow in three steps of a
short run can be late at 90% of 40 collectives. It must be late (at most of the
collectives of each) at as many of its occasions, with the same test against chance: at
10 of 10 at least. A gap between a site's collectives of at least ``BURST_FACTOR`` times
its median gap ends a burst, where at least 1/``MAX_BURST`` of its gaps are that long
(rarer long gaps are pauses between single calls, as a checkpoint's); elsewhere every
collective is an occasion of its own.

Only each group's last ``WINDOW_SLOTS`` collectives are read, up to ``WIDE_SLOTS`` where
those hold the site of a rank to name at too few occasions.

Lateness spreads: the peers a straggler holds up in one group reach their next collective
in another group late too, as a block. A rank is named only when it is late among its
nearest peers (its smallest group), and not when it is on time in a group shared with a
late rank (it waited there for that rank) or shares a pipeline's send/recv group with one
(see ``_origins``); when two ranks would explain each other, the one late in the smaller
group, then the later by more, is the origin.

A straggler is a performance finding, never the cause of a hang: it takes no part in the
root cause and is listed after the hang findings.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb

from fr_otel.analysis import findings as base
from fr_otel.analysis.clocks import CLOCK_SQL
from fr_otel.analysis.findings import EntryRef, Finding, GroupRef, Stacks, entry_json
from fr_otel.analysis.sqlfiles import fragment, query_file, run_file

MIN_COLLECTIVES = 20
"""Collectives at one call site before a rank's lateness there is judged at all: fewer are
thin evidence (rank 0 printing its loss each step of a short run is late every time)."""

BURST_FACTOR = 4
"""How many times a site's median gap between its collectives a gap between bursts is."""

MAX_BURST = 16
"""Most collectives of one site in a burst: longer gaps rarer than one in this many are
pauses between single calls (a checkpoint every 50 steps), not bursts' ends."""

CONSISTENCY = 0.9
"""Share of a site's collectives, and of its occasions, where a straggler is later than
its typical member (the mean of all but the latest member)."""

MIN_EXCESS_NS = 1_000_000
"""Median margin over the typical member below which lateness is not worth a finding: a
millisecond per collective is where a straggler starts to cost a step measurable time."""

CLOCK_MARGIN = 3.0
"""Lateness must exceed this many times the clock offsets' uncertainty."""

MAX_P_VALUE = 1e-3
"""Chance, for a rank as punctual as its peers (later than them about half the time), of
being that often later."""

CPU_SHARE = 0.75
"""A straggler whose issue times are at least this share of its kernels' lateness is late
on the CPU side (it issues late); below, its GPU is."""

WINDOW_SLOTS = 200
"""Collectives per group the straggler analysis reads: the most recent ones. A straggler
is late every step, so a few hundred collectives show it as well as thousands would, at
a fraction of the cost."""

WIDE_SLOTS = 2_000
"""Collectives read of a group where its window held a late rank's site at too few
occasions (a step of hundreds of collectives): as many as Flight Recorder keeps by
default."""

_JUDGED = "gid IN (SELECT gid FROM straggler_judged)"
"""The groups of the ``straggler_judged`` table (``_judge``)."""


def _arrival_sql(coll: str) -> str:
    """The arrival rows (``sql/arrival.sql``) over the collectives CTE ``coll``."""
    return fragment("arrival.sql", coll=coll, clock=CLOCK_SQL)


def _coll_from_rows(source: str, where: str) -> str:
    """The collectives CTE straight from the canonical rows of ``source`` that ``where``
    selects (``fr-otel sql``'s view, any incident)."""
    return fragment("arrival_coll_from_rows.sql", source=source, where=where)


def _coll_from_entries(window_slots: int = WINDOW_SLOTS, groups: str = "true") -> str:
    """The collectives CTE of the incident under analysis, from its ``e``, ``groups`` and
    ``windows`` tables: each group's last ``window_slots``, of those ``groups`` selects
    (SQL over ``gid``)."""
    return fragment("arrival_coll_from_entries.sql", window_slots=window_slots, groups=groups)


ARRIVAL_COLUMNS = (
    "job, incident, pg_name, pg_desc, pg_ranks, collective_seq_id, op, rank, record_id,"
    " call_site, time_created_ns, clock_offset_ns, clock_uncertainty_ns, arrival_ns,"
    " issue_lateness_ns, gpu_lateness_ns, lateness_ns, basis"
)
"""What the documented ``arrival`` view shows (``gid`` is the analyzer's own key)."""

TABLE_COLUMNS = (
    "gid, rank, collective_seq_id, op, record_id, site, time_created_ns, clock_offset_ns,"
    " clock_uncertainty_ns, arrival_ns, issue_lateness_ns, gpu_lateness_ns, lateness_ns,"
    " latest_ns, typical_ns, basis"
)
"""What the analysis's own ``arrival`` table keeps: the documented view's columns that the
incident's ``e`` has, and the two bounds its readers judge by (``latest_ns``,
``typical_ns``). The slot's aggregates that the lateness was worked out from stay out:
the table's write costs by the column, and its readers need none of them."""


def create_arrival(
    connection: duckdb.DuckDBPyConnection,
    *,
    source: str | None = None,
    name: str = "arrival",
) -> None:
    """Create ``name``: as a temporary table, the arrival rows of the incident whose
    ``e`` and ``groups`` tables the analyzer built in ``connection``; with ``source`` (a
    relation of canonical rows), as a view over every incident in it."""
    if source is None:
        body = _arrival_sql(_coll_from_entries())
        connection.execute(
            f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT {TABLE_COLUMNS} FROM ({body})"
        )
        return
    body = _arrival_sql(_coll_from_rows(source, "true"))
    connection.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT {ARRIVAL_COLUMNS} FROM ({body})")


def arrival_query(source: str, where: str) -> str:
    """A query of the arrival rows of ``source`` (canonical rows) that ``where`` selects,
    for a connection with the rules over canonical rows (``sqlfiles.prepare``)."""
    return f"SELECT {ARRIVAL_COLUMNS} FROM ({_arrival_sql(_coll_from_rows(source, where))})"


@dataclass(kw_only=True, slots=True)
class SiteLateness:
    """One rank's lateness at one call site of one group."""

    gid: int
    group: GroupRef
    unit: int
    """The call site's hash (the op's where the entry has no stack)."""
    op: str
    rank: int
    collectives: int
    p50_ns: float
    last: int
    above: int
    example_record: int
    example_seq: int
    basis: str
    clock_offset_ns: int
    clock_uncertainty_ns: int | None
    peers_p50_ns: float = 0.0
    """The site's typical member: the lower median of its members' ``p50_ns``."""
    steps: int = 0
    """The group's steps: the most collectives any of its sites had."""
    group_uncertainty_ns: int | None = None
    """The clock uncertainty of a comparison within the group: its least certain member's."""
    confidence: float = 0.0
    p90_ns: float = 0.0
    """Filled in for the sites of named ranks only (``_detail``), as are the issue times."""
    issue_p50_ns: float = 0.0
    issue_peers_p50_ns: float = 0.0
    lost_ns: int = 0
    """How much earlier its collectives would have run without its lateness (``_detail``)."""
    occasions: int = 0
    """Its collectives there, a burst of them close together counting once (filled in for
    the sites of ranks to name, ``site_occasions``)."""
    late_occasions: int = 0
    """Occasions where it was later than the typical member at most of the collectives."""

    @property
    def excess_ns(self) -> float:
        return self.p50_ns - self.peers_p50_ns


@dataclass(kw_only=True, slots=True)
class _Candidate:
    rank: int
    sites: list[SiteLateness] = field(default_factory=list)

    def groups(self) -> set[int]:
        return {s.gid for s in self.sites}

    def smallest_group(self) -> int:
        return min(len(s.group.ranks or ()) for s in self.sites)


def _p_value(successes: int, trials: int) -> float:
    """P(X >= successes) for X ~ Binomial(trials, 1/2)."""
    if trials <= 200:
        tail = sum(math.comb(trials, k) for k in range(successes, trials + 1))
        return float(tail / 2**trials)
    # normal approximation with continuity correction (exact sums grow slow past this)
    z = (successes - 0.5 - trials / 2) / math.sqrt(trials / 4)
    return 0.5 * math.erfc(z / math.sqrt(2))


def _lower_median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def _judge(connection: duckdb.DuckDBPyConnection, gids: Collection[int]) -> None:
    connection.execute("CREATE OR REPLACE TEMP TABLE straggler_judged (gid UBIGINT)")
    if gids:
        connection.executemany("INSERT INTO straggler_judged VALUES (?)", [(g,) for g in gids])


def site_lateness(
    connection: duckdb.DuckDBPyConnection,
    groups: dict[int, GroupRef],
    *,
    only: Collection[int] | None = None,
) -> list[SiteLateness]:
    """Per (group, call site, rank) lateness from the ``arrival`` table, with the site's
    typical member filled in: the rows that may be late (``_late`` decides), in group,
    site and rank order; ``groups``: the analyzer's, by its group key; ``only``: of these
    groups (by key) alone."""
    _judge(connection, sorted(only or ()))
    rows = query_file(
        connection,
        "site_lateness.sql",
        {
            "every": only is None,
            "min_collectives": MIN_COLLECTIVES,
            "consistency": CONSISTENCY,
            "min_excess_ns": MIN_EXCESS_NS,
        },
    )
    columns = [column[0] for column in rows.description]
    result = []
    for row in rows.fetchall():
        stats = dict(zip(columns, row, strict=True))
        gid = stats["gid"]
        group = groups.get(gid) or GroupRef(name=str(gid), desc=None, ranks=None, key=gid)
        result.append(SiteLateness(group=group, **stats))
    return result


def _late(site: SiteLateness) -> bool:
    if site.collectives < MIN_COLLECTIVES or site.above < CONSISTENCY * site.collectives:
        return False
    if site.excess_ns < MIN_EXCESS_NS:
        return False
    # issue times compare clocks: never name a rank within their uncertainty
    if (
        site.basis == "issue"
        and site.group_uncertainty_ns is not None
        and site.excess_ns <= CLOCK_MARGIN * site.group_uncertainty_ns
    ):
        return False
    p_value = _p_value(site.above, site.collectives)
    site.confidence = 1.0 - p_value
    return p_value <= MAX_P_VALUE


def _separate(site: SiteLateness) -> bool:
    """Late at separate occasions as consistently as at its collectives: at no fewer than
    ``CONSISTENCY`` of them, and as unlikely by chance (its confidence is then this
    test's, the weaker)."""
    if site.late_occasions < CONSISTENCY * site.occasions:
        return False
    p_value = _p_value(site.late_occasions, site.occasions)
    site.confidence = min(site.confidence, 1.0 - p_value)
    return p_value <= MAX_P_VALUE


def stragglers(connection: duckdb.DuckDBPyConnection, groups: dict[int, GroupRef]) -> list[Finding]:
    """``straggler`` findings of the incident under analysis (see ``create_arrival``).

    Their ``example`` and each site's entry are ``EntryRef`` s: the analyzer resolves
    them (call site, sizes, dtypes) with the stacks."""
    keys = {gid: _key(group) for gid, group in groups.items()}
    with_collectives = {
        keys.get(gid) or (str(gid), ())
        for (gid,) in connection.execute("SELECT DISTINCT gid FROM arrival").fetchall()
    }
    sites = site_lateness(connection, groups)
    late, named = _origins_of(sites, with_collectives, keys)
    site_occasions(connection, [s for rank in named for s in late[rank].sites])
    # a site of a rank to name that its group's window holds at too few occasions: read
    # further back, and judge again
    short = _widen(
        connection, {s.gid for rank in named for s in late[rank].sites if not _separate(s)}
    )
    if short:
        sites = [s for s in sites if s.gid not in short]
        sites.extend(site_lateness(connection, groups, only=short))
        late, named = _origins_of(sites, with_collectives, keys)
        # (a rank may be named now that was not, or by a site read afresh)
        site_occasions(
            connection, [s for rank in named for s in late[rank].sites if not s.occasions]
        )
    # who inherited from whom is judged on every site a rank is late at; a rank is then
    # named for the sites where it was late at separate occasions too (a slow moment of
    # its is not a slow rank, and those it held up then stay unnamed all the same)
    for rank in named:
        late[rank].sites = [s for s in late[rank].sites if _separate(s)]
    named = {rank for rank in named if late[rank].sites}
    _detail(connection, [s for rank in named for s in late[rank].sites])
    findings = [_finding(late[rank]) for rank in sorted(named)]
    # the costliest first: the one whose cure would speed the job up the most
    findings.sort(key=_time_lost, reverse=True)
    return findings


def _origins_of(
    sites: list[SiteLateness], with_collectives: set[GroupKey], keys: dict[int, GroupKey]
) -> tuple[dict[int, _Candidate], set[int]]:
    """The late ranks among ``sites``, and those whose lateness is their own (``_origins``)."""
    late: dict[int, _Candidate] = {}
    for site in sites:
        if _late(site):
            late.setdefault(site.rank, _Candidate(rank=site.rank)).sites.append(site)
    # a rank's nearest peers are its smallest group: lateness of its own shows there, where
    # lateness it inherited (it waited for someone elsewhere) moves the group as a block
    nearest: dict[int, int] = {}
    for group in with_collectives:
        for rank in group[1]:
            nearest[rank] = min(nearest.get(rank, len(group[1])), len(group[1]))
    near = {rank for rank, c in late.items() if c.smallest_group() == nearest.get(rank)}
    return late, _origins(late, near, with_collectives, keys)


def site_occasions(connection: duckdb.DuckDBPyConnection, sites: list[SiteLateness]) -> None:
    """Fill in the occasions of ``sites`` (``sql/site_occasions.sql``): only for the sites
    of ranks to name, a few of a large incident's."""
    if not sites:
        return
    connection.execute(
        "CREATE OR REPLACE TEMP TABLE occasion_wanted (gid UBIGINT, unit UBIGINT, rank INTEGER)"
    )
    connection.executemany(
        "INSERT INTO occasion_wanted VALUES (?, ?, ?)",
        sorted({(s.gid, s.unit, s.rank) for s in sites}),
    )
    rows = query_file(
        connection, "site_occasions.sql", {"burst_factor": BURST_FACTOR, "max_burst": MAX_BURST}
    ).fetchall()
    counts = {(gid, unit, rank): (n, late) for gid, unit, rank, n, late in rows}
    for site in sites:
        site.occasions, site.late_occasions = counts.get((site.gid, site.unit, site.rank), (0, 0))


def _widen(connection: duckdb.DuckDBPyConnection, gids: set[int]) -> set[int]:
    """Of ``gids``, the groups with collectives before their window, whose ``arrival`` rows
    are then their last ``WIDE_SLOTS`` collectives' (a late rank's site that its window
    holds at few occasions may be late at many in more of them)."""
    if not gids:
        return set()
    _judge(connection, sorted(gids))
    wider = {
        gid
        for (gid,) in connection.execute(
            f"SELECT gid FROM windows WHERE {_JUDGED} GROUP BY gid"
            " HAVING min(min_seq) <= max(max_seq) - ?",
            [WINDOW_SLOTS],
        ).fetchall()
    }
    if not wider:
        return set()
    _judge(connection, sorted(wider))
    body = _arrival_sql(_coll_from_entries(WIDE_SLOTS, _JUDGED))
    connection.execute(f"DELETE FROM arrival WHERE {_JUDGED}")
    connection.execute(f"INSERT INTO arrival SELECT {TABLE_COLUMNS} FROM ({body})")
    return wider


def _detail(connection: duckdb.DuckDBPyConnection, sites: list[SiteLateness]) -> None:
    """p90, time lost and issue-time lateness of the named ranks' sites (and their peers'
    issue times, which the side needs): only for those few sites, not every one."""
    if not sites:
        return
    run_file(connection, "straggler_sites.sql", {})
    connection.executemany(
        "INSERT INTO wanted VALUES (?, ?)", sorted({(s.gid, s.unit) for s in sites})
    )
    rows = query_file(connection, "straggler_detail.sql").fetchall()
    issue: dict[tuple[int, int], list[float]] = defaultdict(list)
    values: dict[tuple[int, int, int], tuple[float, float, int]] = {}
    for gid, unit, rank, p90, ip50, lost in rows:
        values[(gid, unit, rank)] = (float(p90), float(ip50), int(lost))
        issue[(gid, unit)].append(float(ip50))
    for site in sites:
        site.p90_ns, site.issue_p50_ns, site.lost_ns = values.get(
            (site.gid, site.unit, site.rank), (0.0, 0.0, 0)
        )
        site.issue_peers_p50_ns = _lower_median(issue[(site.gid, site.unit)] or [0.0])


GroupKey = tuple[str, tuple[int, ...]]


def _key(group: GroupRef) -> GroupKey:
    return (group.name, tuple(sorted(group.ranks or ())))


def _origins(
    late: dict[int, _Candidate],
    near: set[int],
    with_collectives: set[GroupKey],
    keys: dict[int, GroupKey],
) -> set[int]:
    """Of the late ranks ``near`` (late among their nearest peers), those whose lateness
    is their own.

    A late rank ``q`` may have inherited its lateness from a late rank ``r`` it shares a
    group with, where ``q`` is not late: one where ``r`` is (``q`` waited for it there),
    or one without collectives to judge (a pipeline's sends and receives, where ``q``
    waits for ``r``'s activations). Of two ranks that could each have inherited from the
    other, the one late in the smaller group, then the one later by more, is the origin.

    ``keys``: the analyzer's groups' keys by group id. The ranks a rank could have inherited
    from are never listed: with thousands of late ranks in one large group, those lists
    held millions of ranks, quadratic in the group's size. A rank is an origin when
    no rank it could have inherited from ranks above it (each group's two highest say so)
    and each of those could have inherited from it."""
    # groups by position: a key holds its members, and hashing thousands of ranks at
    # every set lookup would cost more than the rest
    groups = list(dict.fromkeys(keys.values()))
    index = {group: i for i, group in enumerate(groups)}
    of_gid = {gid: index.get(key) for gid, key in keys.items()}
    judged = {index[group] for group in with_collectives if group in index}
    late_in: dict[int, list[int]] = {}
    of_rank: dict[int, list[int]] = defaultdict(list)
    for i, group in enumerate(groups):
        members = [rank for rank in group[1] if rank in late]
        if members:
            late_in[i] = members
            for rank in members:
                of_rank[rank].append(i)
    # (a site of a group the analyzer does not know is in none of ``groups``)
    flagged = {rank: {of_gid.get(s.gid) for s in c.sites} - {None} for rank, c in late.items()}
    # a group's late members that a member on time there could have inherited from
    sources = {
        i: {o for o in members if i in flagged[o] or i not in judged}
        for i, members in late_in.items()
    }
    # where each rank could have inherited: its groups where it is on time
    inherits_in = {rank: [i for i in of_rank[rank] if i not in flagged[rank]] for rank in late}
    order = {rank: _origin_key(candidate) for rank, candidate in late.items()}
    # per group, its two sources that rank highest: the highest other than any one rank
    top = {
        i: sorted(members, key=order.__getitem__, reverse=True)[:2]
        for i, members in sources.items()
    }

    def outranks_all(rank: int) -> bool:
        for group in inherits_in[rank]:
            best = next((other for other in top[group] if other != rank), None)
            if best is not None and not order[rank] > order[best]:
                return False
        return True

    def could_inherit(rank: int, source: int) -> bool:
        return rank != source and any(source in sources[g] for g in inherits_in[rank])

    return {
        rank
        for rank in near
        if outranks_all(rank)
        and all(
            could_inherit(other, rank)
            for group in inherits_in[rank]
            for other in sources[group]
            if other != rank
        )
    }


def _origin_key(candidate: _Candidate) -> tuple[int, float]:
    """Of two late ranks that could each have inherited from the other: the one late among
    the fewest peers, then the later by more, is the origin."""
    return (-candidate.smallest_group(), max(s.excess_ns for s in candidate.sites))


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def _time_lost(finding: Finding) -> float:
    facts = finding.facts
    return facts.time_lost_ms_total if isinstance(facts, StragglerEvidence) else 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class LateSite:
    """One group and call site where a straggler is late (``evidence.sites``)."""

    group: GroupRef
    op: str
    entry: EntryRef
    collectives: int
    occasions: int
    lateness_ms: dict[str, float]
    excess_ms: float
    last_fraction: float
    confidence: float

    def to_dict(self, entries: base.Entries) -> dict[str, Any]:
        return {
            "process_group": self.group.to_dict(),
            "op": self.op,
            "collectives": self.collectives,
            "occasions": self.occasions,
            "lateness_ms": self.lateness_ms,
            "excess_ms": self.excess_ms,
            "last_fraction": self.last_fraction,
            "confidence": self.confidence,
            **entry_json(self.entry, entries),
        }


@dataclass(kw_only=True)
class StragglerEvidence(base.Evidence):
    """A rank consistently late to its collectives (see docs/analysis.md)."""

    lateness_ms: dict[str, float]
    peers_median_ms: float
    excess_ms: float
    last_fraction: float
    later_than_peers_fraction: float
    collectives: int
    occasions: int
    """Its collectives at the site, a burst of them close together counting once."""
    late_occasions: int
    confidence: float
    time_lost_ms_per_step: float
    time_lost_ms_total: float
    steps: int
    side: str
    basis: str
    example_seq: int | None
    example: EntryRef
    """The entry where it was latest: its call site, sizes and dtypes."""
    clock: dict[str, Any]
    sites: list[LateSite]
    text: str
    """The sentence (not part of the JSON)."""

    JSON_FIELDS = (
        "lateness_ms",
        "peers_median_ms",
        "excess_ms",
        "last_fraction",
        "later_than_peers_fraction",
        "collectives",
        "occasions",
        "late_occasions",
        "confidence",
        "time_lost_ms_per_step",
        "time_lost_ms_total",
        "steps",
        "side",
        "basis",
    )

    def own(self, entries: base.Entries) -> dict[str, Any]:
        return {
            **super().own(entries),
            "example": {
                "collective_seq_id": self.example_seq,
                **entry_json(self.example, entries),
            },
            "clock": self.clock,
            "sites": [site.to_dict(entries) for site in self.sites],
        }

    def own_refs(self) -> Iterator[EntryRef]:
        yield self.example
        for site in self.sites:
            yield site.entry

    def headline(self, finding: Finding) -> str:
        return self.text


def _finding(candidate: _Candidate) -> Finding:
    rank = candidate.rank
    # the site where the rank costs the most: the one the finding is about
    main = max(candidate.sites, key=lambda s: (s.lost_ns, s.excess_ns))
    lost_in_group = sum(s.lost_ns for s in candidate.sites if s.gid == main.gid)
    per_step_ns = lost_in_group / max(main.steps, 1)
    # the smallest group the rank is late in shows the origin best: in larger ones its
    # issue times carry the waits its own lateness caused
    smallest = candidate.smallest_group()
    side = _side([s for s in candidate.sites if len(s.group.ranks or ()) == smallest])
    unc = main.group_uncertainty_ns
    summary = (
        f"rank {rank} is late to {main.op} in {main.group.label()}: last in"
        f" {main.last} of {main.collectives} collectives (late at {main.late_occasions} of"
        f" {main.occasions} separate occasions), {_ms(main.p50_ns):g} ms after the"
        f" first member at the median (p90 {_ms(main.p90_ns):g} ms; its peers"
        f" {_ms(main.peers_p50_ns):g} ms), about {_ms(per_step_ns):g} ms lost per step"
        f" ({_SIDE_WORDS[side]}); a performance problem, not a hang"
    )
    evidence = StragglerEvidence(
        lateness_ms={"median": _ms(main.p50_ns), "p90": _ms(main.p90_ns)},
        peers_median_ms=_ms(main.peers_p50_ns),
        excess_ms=_ms(main.excess_ns),
        last_fraction=round(main.last / main.collectives, 3),
        later_than_peers_fraction=round(main.above / main.collectives, 3),
        collectives=main.collectives,
        occasions=main.occasions,
        late_occasions=main.late_occasions,
        confidence=round(main.confidence, 6),
        time_lost_ms_per_step=_ms(per_step_ns),
        time_lost_ms_total=_ms(lost_in_group),
        steps=main.steps,
        side=side,
        basis=main.basis,
        example_seq=main.example_seq,
        example=EntryRef(rank, main.example_record),
        clock={
            "offset_ms": _ms(main.clock_offset_ns),
            "uncertainty_ms": None if unc is None else _ms(unc),
            "estimated": unc is not None,
        },
        sites=[
            LateSite(
                group=s.group,
                op=s.op,
                entry=EntryRef(rank, s.example_record),
                collectives=s.collectives,
                occasions=s.occasions,
                lateness_ms={"median": _ms(s.p50_ns), "p90": _ms(s.p90_ns)},
                excess_ms=_ms(s.excess_ns),
                last_fraction=round(s.last / s.collectives, 3),
                confidence=round(s.confidence, 6),
            )
            for s in sorted(candidate.sites, key=lambda s: -s.lost_ns)
        ],
        text=summary,
    )
    return Finding(
        kind="straggler",
        group=main.group,
        collective_seq_id=None,
        op=main.op,
        culprit_ranks=[rank],
        facts=evidence,
        stacks=Stacks(culprit={rank: EntryRef(rank, main.example_record)}),
    )


_SIDE_WORDS = {
    "cpu": "it issues the collective late",
    "gpu": "it issues on time, its kernel starts late",
    "unknown": "issue and kernel start times cannot tell which side",
}


def _side(sites: list[SiteLateness]) -> str:
    """``cpu`` when the rank also issued late, ``gpu`` when only its kernels started late."""
    if any(site.basis != "gpu_start" for site in sites):
        return "cpu"
    # a rank whose GPU is slow issues late too at times (its host waits for its GPU before
    # it may queue more work), but its kernels start later still: a CPU straggler's GPU
    # waits for its host, so its kernels start about as late as it issued them
    issue_excess = sum(site.issue_p50_ns - site.issue_peers_p50_ns for site in sites)
    return "cpu" if issue_excess >= CPU_SHARE * sum(site.excess_ns for site in sites) else "gpu"
