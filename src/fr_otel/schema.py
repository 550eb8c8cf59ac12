"""The canonical record table: one row per Flight Recorder entry.

Every producer (dump loader, recorder ring buffer, simulator) writes this schema and
every consumer (Parquet archive, DuckDB analysis, OTLP encoder, HTML report) reads it,
so a new source or sink needs one adapter and nothing else.

Each column's meaning is in its field metadata (``doc``) and in ``COLUMN_DOCS``;
``docs/schema.md`` is generated from the same text. Times are nanoseconds since the
Unix epoch, taken from each rank's own clock (FR records CPU discovery times, which
are not synchronised across hosts).
"""

from __future__ import annotations

import pyarrow as pa

FRAME_TYPE = pa.struct(
    [
        pa.field("name", pa.string()),
        pa.field("filename", pa.string()),
        pa.field("line", pa.int64()),
    ]
)
"""One Python (or C++) stack frame as Flight Recorder stores it."""

SIZES_TYPE = pa.list_(pa.list_(pa.int64()))
"""One shape per tensor: ``[[1024], [4, 256]]``."""

_COLUMNS: list[tuple[str, pa.DataType, bool, str]] = [
    # name, type, nullable, documentation
    ("job", pa.string(), False, "Job name (hive partition key of the archive)."),
    (
        "incident",
        pa.string(),
        False,
        "Incident id: one dump set or one recorder flush (hive partition key).",
    ),
    (
        "run_id",
        pa.string(),
        True,
        "The launch the entry belongs to (the recorder's run id: torchrun's, `fr-otel"
        " run`'s or one rank 0 made); null for dumps imported without one. Part of the"
        " trace and span ids, so two runs of a job never share a trace.",
    ),
    ("rank", pa.int64(), False, "Global rank that recorded the entry."),
    (
        "pg_id",
        pa.int64(),
        True,
        "Rank-local uid of the process group. Not comparable across ranks.",
    ),
    ("pg_name", pa.string(), False, "Process group name (`'0'`, a counter, or a hash)."),
    ("pg_desc", pa.string(), True, "Process group description (`default_pg`, `mesh_tp`, ...)."),
    (
        "pg_ranks",
        pa.list_(pa.int64()),
        True,
        "Global ranks of the group in group-rank order; null when unknown. A rank file"
        " writes the list of a group of over 1,024 members once, in its footer"
        " (`fr_otel.members`), and leaves it null on the rows: fr_otel's readers (`fr-otel"
        " sql`'s views, export, analyze) put it back.",
    ),
    (
        "pg_ranks_inferred",
        pa.bool_(),
        False,
        "True when `pg_ranks` was inferred from which ranks hold entries (gloo's"
        " `pg_config` is broken) rather than read from the dump.",
    ),
    ("record_id", pa.int64(), False, "Rank-local record counter over all groups."),
    (
        "collective_seq_id",
        pa.int64(),
        True,
        "Per-group collective counter. P2P entries carry the current value unchanged.",
    ),
    ("p2p_seq_id", pa.int64(), True, "Per-group point-to-point counter."),
    (
        "op_id",
        pa.int64(),
        True,
        "Per-group logical op counter (counts ops inside coalesced groups).",
    ),
    ("backend", pa.string(), True, "Backend prefix of `profiling_name`: `nccl`, `gloo`, ..."),
    (
        "op",
        pa.string(),
        False,
        "Operation without backend prefix or peer suffix: `all_reduce`, `send`, `coalesced`.",
    ),
    ("profiling_name", pa.string(), True, "The raw FR `profiling_name`, e.g. `nccl:send 0->1`."),
    ("peer", pa.int64(), True, "Global rank of the point-to-point peer; null for collectives."),
    ("input_sizes", SIZES_TYPE, True, "Input tensor shapes."),
    ("output_sizes", SIZES_TYPE, True, "Output tensor shapes."),
    ("input_dtypes", pa.list_(pa.string()), True, "Input dtypes (`Float`, `BFloat16`, ...)."),
    ("output_dtypes", pa.list_(pa.string()), True, "Output dtypes."),
    ("state", pa.string(), True, "`scheduled`, `started` or `completed`."),
    ("time_created_ns", pa.int64(), True, "When the op was enqueued (wall clock)."),
    (
        "time_started_ns",
        pa.int64(),
        True,
        "When the watchdog discovered the op had started; null if never seen started.",
    ),
    (
        "time_completed_ns",
        pa.int64(),
        True,
        "When the watchdog discovered completion; null if never seen completed.",
    ),
    ("duration_ms", pa.float64(), True, "GPU duration, present only when NCCL timing is on."),
    (
        "retired",
        pa.bool_(),
        True,
        "The work left the watchdog list. Retired but not completed means timed out"
        " (gloo: retired is its only completion signal).",
    ),
    ("timeout_ms", pa.int64(), True, "Configured timeout of the op."),
    ("is_p2p", pa.bool_(), True, "Point-to-point op (send/recv and their coalesced trailer)."),
    ("thread_name", pa.string(), True, "Recording thread name (FR >= 2.10)."),
    ("thread_id", pa.string(), True, "Recording thread id (FR >= 2.10), as FR writes it."),
    (
        "frames",
        pa.list_(FRAME_TYPE),
        True,
        "Python stack at record time, innermost first; null when the dump has none (JSON).",
    ),
    (
        "call_site",
        pa.string(),
        True,
        "Innermost frame of the user's code in `frames` (`file:line in function`), skipping"
        " torch and its wrappers; null without frames.",
    ),
    (
        "pg_last_enqueued_seq",
        pa.int64(),
        True,
        "From the dump's `pg_status`: the group's last enqueued collective seq on this rank.",
    ),
    (
        "pg_last_started_seq",
        pa.int64(),
        True,
        "From `pg_status`: last started collective seq (-1 when never; gloo never sets it).",
    ),
    (
        "pg_last_completed_seq",
        pa.int64(),
        True,
        "From `pg_status`: last completed collective seq.",
    ),
    ("dump_time_ns", pa.int64(), True, "When the buffer was dumped (file mtime for imports)."),
    ("source_file", pa.string(), True, "The dump file (or `recorder`) the row came from."),
    (
        "source_format",
        pa.string(),
        False,
        "`pickle`, `json`, `recorder`, `simulator` or `otlp` (read back from spans): how the"
        " row reached us.",
    ),
    ("fr_version", pa.string(), True, "The dump's FR format version, e.g. `2.10`."),
    ("comm_lib_version", pa.string(), True, "NCCL (or other library) version from the dump."),
]

COLUMN_DOCS: dict[str, str] = {name: doc for name, _, _, doc in _COLUMNS}
"""Column name -> one-line documentation."""

SCHEMA_VERSION_KEY = b"fr_otel.schema_version"
"""The key of a rank file's key-value metadata that says which archive schema wrote it."""

RECORD_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field(name, dtype, nullable=nullable, metadata={"doc": doc})
        for name, dtype, nullable, doc in _COLUMNS
    ],
    metadata={SCHEMA_VERSION_KEY: b"1"},
)
"""The canonical Arrow schema of one Flight Recorder entry."""

COLUMNS: tuple[str, ...] = tuple(RECORD_SCHEMA.names)

MEMBERS_DICTIONARY = pa.dictionary(pa.int32(), RECORD_SCHEMA.field("pg_ranks").type)
"""``pg_ranks`` as each row's index into distinct member lists: how the recorder, the span
import and ``export`` hold a group's list once for all its rows."""


def with_members_type(schema: pa.Schema, kind: pa.DataType) -> pa.Schema:
    """``schema`` with its ``pg_ranks`` field of type ``kind`` (a dictionary column's)."""
    at = schema.get_field_index("pg_ranks")
    return schema.set(at, schema.field(at).with_type(kind))


SOURCE_FORMATS = frozenset({"pickle", "json", "recorder", "simulator", "otlp"})

# --- rules over rows -------------------------------------------------------------------
# Each rule is written twice, side by side: for Python (one row's values) and as a DuckDB
# macro (``ENTRY_MACROS``, created on every analysis connection by
# ``fr_otel.analysis.sqlfiles.prepare``). Every reader of the archive uses one of the two.

P2P_OPS = frozenset({"send", "recv"})
"""Ops that are point-to-point whatever ``is_p2p`` says (dumps that predate the flag)."""


def is_p2p_entry(*, is_p2p: bool | None, op: str | None) -> bool:
    """Whether an entry is point-to-point: flagged so, or a send or recv."""
    return bool(is_p2p) or op in P2P_OPS


def is_done_entry(*, state: str | None, backend: str | None, retired: bool | None) -> bool:
    """Whether an entry's work finished: completed, or (gloo, which never marks entries
    started or completed) retired, its only completion signal. For NCCL a retired entry
    that did not complete timed out."""
    return state == "completed" or (backend == "gloo" and bool(retired))


ENTRY_MACROS: tuple[str, ...] = (
    # is_p2p_entry; NULL never counts
    "CREATE OR REPLACE TEMP MACRO entry_p2p(is_p2p, op) AS coalesce(is_p2p, false) OR op IN"
    f" ({', '.join(repr(op) for op in sorted(P2P_OPS))})",
    # is_done_entry, with SQL's NULL where the state is null and the entry not gloo's:
    # written exactly as the queries that used it had it
    "CREATE OR REPLACE TEMP MACRO entry_done(state, backend, retired) AS"
    " state = 'completed' OR (backend = 'gloo' AND coalesce(retired, false))",
)
"""``entry_p2p(is_p2p, op)`` and ``entry_done(state, backend, retired)``: the rules above
for SQL over canonical rows."""


def empty_table() -> pa.Table:
    """A table with the canonical schema and no rows."""
    return RECORD_SCHEMA.empty_table()


def schema_markdown() -> str:
    """``docs/schema.md``: the schema as a Markdown table (``make docs``)."""
    lines = [
        "# The canonical record schema",
        "",
        "One row per Flight Recorder entry, shared by every producer and consumer. Generated",
        "from `src/fr_otel/schema.py` by `make docs`; a test keeps the two in step.",
        "",
        "| column | type | nullable | meaning |",
        "|---|---|---|---|",
    ]
    for field in RECORD_SCHEMA:
        doc = COLUMN_DOCS[field.name]
        lines.append(
            f"| `{field.name}` | `{field.type}` | {'yes' if field.nullable else 'no'} | {doc} |"
        )
    return "\n".join(lines) + "\n"
