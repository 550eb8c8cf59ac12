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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    FRAME_TYPE: pa.DataType
    """One Python (or C++) stack frame as Flight Recorder stores it."""
    SIZES_TYPE: pa.DataType
    """One shape per tensor: ``[[1024], [4, 256]]``."""
    RECORD_SCHEMA: pa.Schema
    """The canonical Arrow schema of one Flight Recorder entry."""
    MEMBERS_DICTIONARY: pa.DataType
    """``pg_ranks`` as each row's index into distinct member lists: how the recorder, the
    span import and ``export`` hold a group's list once for all its rows."""

# Column types are named here, not built: the Arrow objects above are made on first use
# (``__getattr__``), so that readers of an archive that need only names and SQL types
# (an analysis, ``fr-otel sql``) never import pyarrow, and numpy with it, a slow import.
# "list<T>" is a list of T; "frame" is FRAME_TYPE.
_FRAME_FIELDS = (("name", "string"), ("filename", "string"), ("line", "int64"))
_SIZES = "list<list<int64>>"

_COLUMNS: list[tuple[str, str, bool, str]] = [
    # name, type, nullable, documentation
    ("job", "string", False, "Job name (hive partition key of the archive)."),
    (
        "incident",
        "string",
        False,
        "Incident id: one dump set or one recorder flush (hive partition key).",
    ),
    (
        "run_id",
        "string",
        True,
        "The launch the entry belongs to (the recorder's run id: torchrun's, `fr-otel"
        " run`'s or one rank 0 made); null for dumps imported without one. Part of the"
        " trace and span ids, so two runs of a job never share a trace.",
    ),
    ("rank", "int64", False, "Global rank that recorded the entry."),
    (
        "pg_id",
        "int64",
        True,
        "Rank-local uid of the process group. Not comparable across ranks.",
    ),
    ("pg_name", "string", False, "Process group name (`'0'`, a counter, or a hash)."),
    ("pg_desc", "string", True, "Process group description (`default_pg`, `mesh_tp`, ...)."),
    (
        "pg_ranks",
        "list<int64>",
        True,
        "Global ranks of the group in group-rank order; null when unknown. A rank file"
        " writes the list of a group of over 1,024 members once, in its footer"
        " (`fr_otel.members`), and leaves it null on the rows: fr_otel's readers (`fr-otel"
        " sql`'s views, export, analyze) put it back.",
    ),
    (
        "pg_ranks_inferred",
        "bool",
        False,
        "True when `pg_ranks` was inferred from which ranks hold entries (gloo's"
        " `pg_config` is broken) rather than read from the dump.",
    ),
    ("record_id", "int64", False, "Rank-local record counter over all groups."),
    (
        "collective_seq_id",
        "int64",
        True,
        "Per-group collective counter. P2P entries carry the current value unchanged.",
    ),
    ("p2p_seq_id", "int64", True, "Per-group point-to-point counter."),
    (
        "op_id",
        "int64",
        True,
        "Per-group logical op counter (counts ops inside coalesced groups).",
    ),
    ("backend", "string", True, "Backend prefix of `profiling_name`: `nccl`, `gloo`, ..."),
    (
        "op",
        "string",
        False,
        "Operation without backend prefix or peer suffix: `all_reduce`, `send`, `coalesced`."
        " Torch's name for it, as its Flight Recorder records it; the recorder's row of a"
        " call whose torch name it never learned has the function called (`api`).",
    ),
    ("profiling_name", "string", True, "The raw FR `profiling_name`, e.g. `nccl:send 0->1`."),
    ("peer", "int64", True, "Global rank of the point-to-point peer; null for collectives."),
    ("input_sizes", _SIZES, True, "Input tensor shapes."),
    ("output_sizes", _SIZES, True, "Output tensor shapes."),
    ("input_dtypes", "list<string>", True, "Input dtypes (`Float`, `BFloat16`, ...)."),
    ("output_dtypes", "list<string>", True, "Output dtypes."),
    ("state", "string", True, "`scheduled`, `started` or `completed`."),
    ("time_created_ns", "int64", True, "When the op was enqueued (wall clock)."),
    (
        "time_started_ns",
        "int64",
        True,
        "When the watchdog discovered the op had started; null if never seen started.",
    ),
    (
        "time_completed_ns",
        "int64",
        True,
        "When the watchdog discovered completion; null if never seen completed.",
    ),
    ("duration_ms", "double", True, "GPU duration, present only when NCCL timing is on."),
    (
        "retired",
        "bool",
        True,
        "The work left the watchdog list. Retired but not completed means timed out"
        " (gloo: retired is its only completion signal).",
    ),
    ("timeout_ms", "int64", True, "Configured timeout of the op."),
    ("is_p2p", "bool", True, "Point-to-point op (send/recv and their coalesced trailer)."),
    ("thread_name", "string", True, "Recording thread name (FR >= 2.10)."),
    ("thread_id", "string", True, "Recording thread id (FR >= 2.10), as FR writes it."),
    (
        "frames",
        "list<frame>",
        True,
        "Python stack at record time, innermost first; null when the dump has none (JSON).",
    ),
    (
        "call_site",
        "string",
        True,
        "Innermost frame of the user's code in `frames` (`file:line in function`), skipping"
        " torch and its wrappers; null without frames.",
    ),
    (
        "pg_last_enqueued_seq",
        "int64",
        True,
        "From the dump's `pg_status`: the group's last enqueued collective seq on this rank.",
    ),
    (
        "pg_last_started_seq",
        "int64",
        True,
        "From `pg_status`: last started collective seq (-1 when never; gloo never sets it).",
    ),
    (
        "pg_last_completed_seq",
        "int64",
        True,
        "From `pg_status`: last completed collective seq.",
    ),
    ("dump_time_ns", "int64", True, "When the buffer was dumped (file mtime for imports)."),
    ("source_file", "string", True, "The dump file (or `recorder`) the row came from."),
    (
        "source_format",
        "string",
        False,
        "`pickle`, `json`, `recorder`, `simulator` or `otlp` (read back from spans): how the"
        " row reached us.",
    ),
    ("fr_version", "string", True, "The dump's FR format version, e.g. `2.10`."),
    ("comm_lib_version", "string", True, "NCCL (or other library) version from the dump."),
    (
        "api",
        "string",
        True,
        "The `torch.distributed` function the user called (`reduce_scatter_tensor`), where"
        " the recorder's hooks saw the call; `op` and `profiling_name` stay torch's own"
        " (gloo runs that call as `all_reduce`), so rows of the recorder and of torch's"
        " dumps compare alike. Null for entries only torch's Flight Recorder saw, and for"
        " rows of dumps.",
    ),
    (
        "host",
        "string",
        True,
        "The host the rank ran on: the recorder's (`socket.gethostname()`, or"
        " `FR_OTEL_HOST`), or for imported dumps the host in the file name"
        " (`<host>.pci3_rank_N`, `nccl_trace_rank_<host>_N`) or in `fr-otel import"
        " --hosts`; null when unknown (archives of schema version 1 and 2).",
    ),
    (
        "local_rank",
        "int64",
        True,
        "The rank's index on its host (`LOCAL_RANK`, as torchrun sets it); null when unknown.",
    ),
    (
        "device",
        "string",
        True,
        "The accelerator the rank drove, where known: the GPU's UUID (`GPU-...`), else its"
        " PCI bus id; null on CPU (gloo) and for dumps.",
    ),
]

COLUMN_DOCS: dict[str, str] = {name: doc for name, _, _, doc in _COLUMNS}
"""Column name -> one-line documentation."""

SCHEMA_VERSION_KEY = b"fr_otel.schema_version"
"""The key of a rank file's key-value metadata that says which archive schema wrote it."""

SCHEMA_VERSION = "3"
"""The archive schema version ``RECORD_SCHEMA`` writes (under ``SCHEMA_VERSION_KEY``).
Every reader selects the canonical columns by name, so a file without a later nullable
column reads it as null. ``1``: the rows alone; ``2``: the same rows with large groups'
members in the footer (``archive.footer_members``); ``3``: where each rank ran (``host``,
``local_rank``, ``device``) and the footer as in 2, so that a file's null host says
"not known" and not "written before hosts were kept". A change of a column's type or
meaning needs a new one; ``archive.checks.READABLE_VERSIONS`` keeps the older ones read."""

HOST_COLUMNS: tuple[str, ...] = ("host", "local_rank", "device")
"""Where a row's rank ran (schema version 3)."""

COLUMNS: tuple[str, ...] = tuple(name for name, _, _, _ in _COLUMNS)

_SQL_SCALARS = {"string": "VARCHAR", "int64": "BIGINT", "double": "DOUBLE", "bool": "BOOLEAN"}


def _sql_type(kind: str) -> str:
    if kind.startswith("list<"):
        return f"{_sql_type(kind[len('list<') : -1])}[]"
    if kind == "frame":
        return "STRUCT(" + ", ".join(f'"{n}" {_sql_type(k)}' for n, k in _FRAME_FIELDS) + ")"
    return _SQL_SCALARS[kind]


COLUMN_SQL_TYPES: dict[str, str] = {name: _sql_type(kind) for name, kind, _, _ in _COLUMNS}
"""Column name -> its DuckDB type, as DuckDB reads the column from a rank file."""


def _arrow_type(kind: str) -> pa.DataType:
    import pyarrow as pa

    if kind.startswith("list<"):
        return pa.list_(_arrow_type(kind[len("list<") : -1]))
    if kind == "frame":
        return pa.struct([pa.field(n, _arrow_type(k)) for n, k in _FRAME_FIELDS])
    scalars = {
        "string": pa.string(),
        "int64": pa.int64(),
        "double": pa.float64(),
        "bool": pa.bool_(),
    }
    return scalars[kind]


_ARROW: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    if name not in ("FRAME_TYPE", "SIZES_TYPE", "RECORD_SCHEMA", "MEMBERS_DICTIONARY"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _ARROW:
        import pyarrow as pa

        schema = pa.schema(
            [
                pa.field(name, _arrow_type(kind), nullable=nullable, metadata={"doc": doc})
                for name, kind, nullable, doc in _COLUMNS
            ],
            metadata={SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode()},
        )
        _ARROW.update(
            FRAME_TYPE=_arrow_type("frame"),
            SIZES_TYPE=_arrow_type(_SIZES),
            RECORD_SCHEMA=schema,
            MEMBERS_DICTIONARY=pa.dictionary(pa.int32(), schema.field("pg_ranks").type),
        )
    return _ARROW[name]


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


ALL_GATHER_OPS = frozenset(
    {
        "all_gather",
        "_all_gather_base",
        "_allgather_base",
        "all_gather_into_tensor",
        "all_gather_into_tensor_coalesced",
        "allgather_into_tensor_coalesced",
    }
)
"""Ops whose output holds one input per member: the analyzer's shape rule checks that, and
the import reads a group's size from it. ``_allgather_base`` is the name of the c10d
backends' method (torch's FR titles NCCL's ``_all_gather_base``)."""


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
    schema: pa.Schema = __getattr__("RECORD_SCHEMA")
    return schema.empty_table()


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
    schema: pa.Schema = __getattr__("RECORD_SCHEMA")
    for field in schema:
        doc = COLUMN_DOCS[field.name]
        lines.append(
            f"| `{field.name}` | `{field.type}` | {'yes' if field.nullable else 'no'} | {doc} |"
        )
    return "\n".join(lines) + "\n"
