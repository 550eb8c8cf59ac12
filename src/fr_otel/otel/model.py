"""The span model: how one Flight Recorder entry becomes one OpenTelemetry span.

Every attribute name fr_otel writes is defined here and only here: dashboards, TraceQL
queries and docs take their names from this module (``docs/span-model.md``).

- **Trace**: one per collective instance across ranks. Its id is derived from the job,
  the run id where there is one, the group (name and rank set) and the sequence number,
  so every rank computes the same id without talking to the others, re-exporting the same
  data gives the same ids, and a rerun of the job starts new traces.
  A send or recv has no cross-rank sequence number, so it gets a trace of its own per
  rank and p2p sequence number.
- **Span**: one per entry; its id is derived from the trace key, the rank and the
  entry's record id. Name: the op (low cardinality). Start: creation. End: completion,
  else the dump time (work still in flight). Not completed: status ERROR with
  ``error.type`` ``timeout`` (pending past its timeout, or retired without completing)
  or ``not_completed``.
- **Resource**: one per rank: ``service.name`` is the job, ``service.instance.id`` is
  unique per rank, plus the rank itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Final

# Resource attributes (OpenTelemetry semantic conventions, plus ours).
SERVICE_NAME: Final = "service.name"
SERVICE_INSTANCE_ID: Final = "service.instance.id"
HOST_NAME: Final = "host.name"
PROCESS_PID: Final = "process.pid"

# Ours: one namespace, named after the project (semantic conventions have none for
# collective communication).
NS: Final = "fr_otel"
RANK: Final = f"{NS}.rank"
JOB: Final = f"{NS}.job"
INCIDENT: Final = f"{NS}.incident"
RUN_ID: Final = f"{NS}.run_id"
PG_NAME: Final = f"{NS}.pg.name"
PG_DESC: Final = f"{NS}.pg.desc"
PG_SIZE: Final = f"{NS}.pg.size"
PG_RANKS: Final = f"{NS}.pg.ranks"
PG_RANK_RANGES: Final = f"{NS}.pg.rank_ranges"
PG_RANKS_LISTED_MAX: Final = 64
"""Groups up to this size carry their members as ``PG_RANKS`` (an int array), larger ones
as ``PG_RANK_RANGES`` (text: ``0-9999``, ``3-9999/4``; ``fr_otel.otel.rankranges``)."""
COLLECTIVE_SEQ_ID: Final = f"{NS}.collective_seq_id"
P2P_SEQ_ID: Final = f"{NS}.p2p_seq_id"
OP: Final = f"{NS}.op"
API: Final = f"{NS}.api"
"""The ``torch.distributed`` function called, where the recorder's hooks saw the call
(``OP`` is torch's name for the op: the two differ for ``reduce_scatter_tensor`` on gloo)."""
BACKEND: Final = f"{NS}.backend"
PEER: Final = f"{NS}.peer"
INPUT_SIZES: Final = f"{NS}.input_sizes"
OUTPUT_SIZES: Final = f"{NS}.output_sizes"
INPUT_DTYPES: Final = f"{NS}.input_dtypes"
OUTPUT_DTYPES: Final = f"{NS}.output_dtypes"
STATE: Final = f"{NS}.state"
TIMEOUT_MS: Final = f"{NS}.timeout_ms"
RECORD_ID: Final = f"{NS}.record_id"

# The analyzer's verdict, as a span in the trace of the collective it is about.
VERDICT_SPAN_NAME: Final = f"{NS}.verdict"
FINDING_KIND: Final = f"{NS}.finding.kind"
FINDING_CULPRIT_RANKS: Final = f"{NS}.finding.culprit_ranks"
FINDING_SUMMARY: Final = f"{NS}.finding.summary"
FINDING_ROOT_CAUSE: Final = f"{NS}.finding.root_cause"
FINDING_INDEX: Final = f"{NS}.finding.index"
FINDING_CONSEQUENCE_OF: Final = f"{NS}.finding.consequence_of"
ANALYZER_INSTANCE: Final = "analyzer"

# The live check's verdict (a desync) or stall suspect, as a span carrying an event in the
# trace of the collective it is about, and as a log record pointing at that span. The
# culprit and the kind keep the analyzer's names: one query finds both.
LIVE_VERDICT_SPAN_NAME: Final = f"{NS}.live.verdict"
LIVE_STALL_SPAN_NAME: Final = f"{NS}.live.stall"
LIVE_DESYNC_EVENT: Final = f"{NS}.live.desync"
LIVE_STALL_EVENT: Final = f"{NS}.live.stall"
LIVE_ID: Final = f"{NS}.live.id"
"""The record's id in the archive (``ARCHIVE/_live``)."""
LIVE_CALL_SITE: Final = f"{NS}.live.call_site"
"""Desync: where the first culprit issued its collective; stall: where the first laggard's
training thread is (``file:line in function``)."""
LIVE_SECONDS: Final = f"{NS}.live.seconds"
"""From the divergence (stall: the first waiting member's collective) to the finding."""
LIVE_WAITING_RANKS: Final = f"{NS}.live.waiting_ranks"
LIVE_WAITED_S: Final = f"{NS}.live.waited_s"
LIVE_INSTANCE: Final = "live"
"""``service.instance.id`` of the live check's spans and logs: ``<job>/live/<host>``."""
LIVE_RANK: Final = -2
"""The rank in the live check's span ids: ranks' are >= 0, the analyzer's -1."""
LIVE_BLIND_RANKS_METRIC: Final = f"{NS}.live.blind_ranks"
"""Gauge (unit ``{rank}``): how many of its host's ranks the live check cannot read now."""
LIVE_BLIND_EPISODES_METRIC: Final = f"{NS}.live.blind_episodes"
"""Monotonic sum: how many times ranks became unreadable to the live check."""
LIVE_RANKS: Final = f"{NS}.live.ranks"
"""The blindness metrics' data point attribute: the ranks it cannot read (a string list,
so that Prometheus gets one label, not a label per rank)."""

# An incident as a signal (``otel.incident``): a log record with this event name, and a
# monotonic sum counting incidents, whenever the recorder declares one or an analysis finds
# something. Its kind is the root finding's (``FINDING_KIND``), or, for the recorder's
# declaration before any analysis, the trigger's name (one of ``INCIDENT_TRIGGERS``).
INCIDENT_EVENT: Final = f"{NS}.incident"
INCIDENTS_METRIC: Final = f"{NS}.incidents"
"""Monotonic cumulative sum (unit ``{incident}``); Prometheus names it
``fr_otel_incidents_total``."""
INCIDENT_TRIGGER: Final = f"{NS}.incident.trigger"
"""What made the recorder declare the incident (one of ``INCIDENT_TRIGGERS``)."""
INCIDENT_TRIGGERS: Final = (
    "collective_error",
    "timeout",
    "torch_dump",
    "uncaught_exception",
    "aborted",
    "terminated",
    "signal",
    "operator",
    "live_check",
    "job_failed",
)
"""The recorder's triggers, its incidents' kind before any analysis: a collective raised,
one ran past its timeout, torch wrote its dump-on-timeout file, an exception nobody caught,
``SIGABRT``, the launcher's ``SIGTERM``, the operator's signal or FIFO (a snapshot the
recorder sends no signal for: ``recorder.triggers.ASKED_FOR``), the live check's verdict,
the job failing without every rank flushing (``fr-otel run``). Anything else is counted
as ``other``."""
OTHER_TRIGGER: Final = "other"

# Semantic conventions for the call site and errors.
CODE_FUNCTION: Final = "code.function.name"
CODE_FILE: Final = "code.file.path"
CODE_LINE: Final = "code.line.number"
ERROR_TYPE: Final = "error.type"

ERROR_TIMEOUT: Final = "timeout"
ERROR_NOT_COMPLETED: Final = "not_completed"

SCOPE_NAME: Final = "fr_otel"

SPAN_ATTRIBUTES: Final = (
    RANK,
    PG_NAME,
    PG_DESC,
    PG_SIZE,
    PG_RANKS,
    PG_RANK_RANGES,
    COLLECTIVE_SEQ_ID,
    P2P_SEQ_ID,
    OP,
    API,
    BACKEND,
    PEER,
    INPUT_SIZES,
    OUTPUT_SIZES,
    INPUT_DTYPES,
    OUTPUT_DTYPES,
    STATE,
    TIMEOUT_MS,
    RECORD_ID,
    INCIDENT,
    RUN_ID,
    CODE_FUNCTION,
    CODE_FILE,
    CODE_LINE,
    ERROR_TYPE,
    FINDING_KIND,
    FINDING_CULPRIT_RANKS,
    FINDING_SUMMARY,
    FINDING_ROOT_CAUSE,
    FINDING_INDEX,
    FINDING_CONSEQUENCE_OF,
    LIVE_ID,
    LIVE_CALL_SITE,
    LIVE_SECONDS,
    LIVE_WAITING_RANKS,
    LIVE_WAITED_S,
)
"""Every span attribute fr_otel may set (a test checks that docs/span-model.md names each)."""

INCIDENT_ATTRIBUTES: Final = (
    JOB,
    INCIDENT,
    FINDING_KIND,
    FINDING_SUMMARY,
    RUN_ID,
    INCIDENT_TRIGGER,
    RANK,
    PG_NAME,
    PG_DESC,
    COLLECTIVE_SEQ_ID,
    OP,
    FINDING_CULPRIT_RANKS,
    CODE_FILE,
    CODE_LINE,
    CODE_FUNCTION,
)
"""Every attribute an incident's log record may carry (``otel.incident``); its count's data
points carry ``JOB``, ``FINDING_KIND``, ``INCIDENT`` and ``FINDING_CULPRIT_RANKS``. A test
checks that docs/span-model.md names each."""


def trace_key(
    *,
    job: str,
    pg_name: str,
    pg_ranks: list[int] | tuple[int, ...] | None,
    collective_seq_id: int | None,
    is_p2p: bool,
    rank: int,
    p2p_seq_id: int | None,
    run_id: str | None = None,
) -> bytes:
    """What identifies the trace an entry belongs to (see the module docstring)."""
    return trace_key_in_group(
        group_key(job=job, pg_name=pg_name, pg_ranks=pg_ranks, run_id=run_id),
        collective_seq_id=collective_seq_id,
        is_p2p=is_p2p,
        rank=rank,
        p2p_seq_id=p2p_seq_id,
    )


def collective_trace_key(
    *,
    job: str,
    pg_name: str,
    pg_ranks: list[int] | tuple[int, ...] | None,
    collective_seq_id: int | None,
    run_id: str | None = None,
) -> bytes:
    """``trace_key`` of a group's collective: the trace every member's span of it is in
    (and a finding or a live verdict about it)."""
    return trace_key(
        job=job,
        pg_name=pg_name,
        pg_ranks=pg_ranks,
        collective_seq_id=collective_seq_id,
        is_p2p=False,
        rank=0,
        p2p_seq_id=None,
        run_id=run_id,
    )


def group_key(
    *,
    job: str,
    pg_name: str,
    pg_ranks: list[int] | tuple[int, ...] | None,
    run_id: str | None = None,
) -> str:
    """The part of ``trace_key`` one process group's entries share (computed once per
    group by callers with many entries: a 1,024-rank member list is long to format).
    Without a run id (dumps imported without one) the key is what it always was."""
    ranks = ",".join(map(str, sorted(pg_ranks))) if pg_ranks else ""
    job_part = f"{job}\x00run={run_id}" if run_id else job
    return f"{job_part}\x00{pg_name}\x00{ranks}\x00"


def trace_key_in_group(
    group: str,
    *,
    collective_seq_id: int | None,
    is_p2p: bool,
    rank: int,
    p2p_seq_id: int | None,
) -> bytes:
    """``trace_key`` for an entry of the group whose ``group_key`` is ``group``."""
    tail = f"p2p\x00{rank}\x00{p2p_seq_id}" if is_p2p else f"coll\x00{collective_seq_id}"
    return (group + tail).encode()


def trace_id(key: bytes) -> bytes:
    """16 bytes, never all zero (an all-zero id is invalid in OTLP)."""
    digest = hashlib.blake2b(key, digest_size=16).digest()
    return digest if any(digest) else digest[:-1] + b"\x01"


def span_id(key: bytes, rank: int, record_id: int) -> bytes:
    """8 bytes, never all zero."""
    digest = hashlib.blake2b(key + f"\x00{rank}\x00{record_id}".encode(), digest_size=8).digest()
    return digest if any(digest) else digest[:-1] + b"\x01"


def instance_id(job: str, rank: int) -> str:
    return f"{job}/rank-{rank}"


def resource_attributes(
    job: str, rank: int, extra: Mapping[str, str | int] | None = None
) -> list[tuple[str, str | int]]:
    """The resource of one rank's spans: fr_otel's own attributes, then ``extra`` (from
    ``OTEL_RESOURCE_ATTRIBUTES``, host and process), which never overrides them."""
    own: list[tuple[str, str | int]] = [
        (SERVICE_NAME, job),
        (SERVICE_INSTANCE_ID, instance_id(job, rank)),
        (RANK, rank),
        (JOB, job),
    ]
    taken = {key for key, _ in own}
    return own + [(k, v) for k, v in (extra or {}).items() if k not in taken]
