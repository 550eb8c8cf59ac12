"""The span plan: which span attribute comes from which canonical column, in what order.

``SPAN_PLAN`` is the one description the three span codecs read: the protobuf encoder
(``encode.row_to_span``), the wire encoder (``wire``: shared attributes once per block of
alike spans, per-span ones a column at a time) and the importer (``otlp_import``, which
reads each attribute back into its column). Adding a span attribute is one line here;
its name goes to ``model`` (where every attribute name is defined) and
``docs/span-model.md``.

What the plan does not list is written by rules every codec shares through this module
and ``model``: the trace and span ids (``model.trace_key``), the name (the op), the times,
and the status of work that never finished (``error_type``, ``error_message``), whose
``error.type`` attribute follows the plan's. The resource (one per rank) is
``model.resource_attributes``, with the rank's host (``rank_resource``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import pyarrow as pa

from fr_otel.otel import model
from fr_otel.otel.rankranges import from_ranges, to_ranges
from fr_otel.schema import RECORD_SCHEMA

Form = Literal["value", "text", "count", "json", "call_site", "members"]
"""How a column's value becomes attributes:

- ``value``: the value as it is (string, int, or a list of those);
- ``text``: a string, ``""`` for null (never left out);
- ``count``: a list's length;
- ``json``: JSON text (lists of lists, which attribute values cannot hold);
- ``call_site``: ``file:line in function`` as the semantic-convention ``code.*``
  attributes (``call_site_attributes``), none for a null or empty one;
- ``members``: a group's member list, as the int array ``key`` up to
  ``model.PG_RANKS_LISTED_MAX`` members, and above that as its runs
  (``rankranges``) in ``model.PG_RANK_RANGES``: on every span of a 10,000-rank group a
  list would be nearly all of the span's bytes.
"""

Only = Literal["p2p", "collective"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SpanAttribute:
    """One line of the plan: a span attribute and the column it is written from."""

    key: str
    """The attribute's name (from ``model``); for ``call_site`` the first of the three."""
    column: str
    """The canonical column (``RECORD_SCHEMA``) it is written from and read back into."""
    form: Form = "value"
    optional: bool = True
    """Left out where the column is null (``text`` and ``call_site`` decide for themselves).
    A required attribute of a null writes the text ``None``, as protobuf's string would."""
    per_span: bool = False
    """Differs from span to span (an integer the wire encoder writes a column at a time);
    otherwise shared by every span of a block (the wire encoder writes it once per block)."""
    only: Only | None = None
    """Written for point-to-point entries only, or for collectives only."""

    def applies(self, *, p2p: bool) -> bool:
        """Whether an entry that is (or is not) point-to-point carries this attribute."""
        return self.only is None or (self.only == "p2p") == p2p

    def pairs(self, value: Any) -> list[tuple[str, Any]]:
        """The attributes for the column's ``value`` (``applies`` already checked)."""
        form = self.form
        if form == "text":
            return [(self.key, value or "")]
        if form == "call_site":
            return call_site_attributes(value)
        if value is None and self.optional:
            return []
        if form == "count":
            return [(self.key, len(value))]
        if form == "json":
            return [(self.key, json.dumps(value, separators=(",", ":")))]
        if form == "members":
            return [_members_pair(self.key, value)]
        return [(self.key, value)]

    def read(self, attributes: dict[str, Any]) -> Any:
        """The column's value back from a span's ``attributes``; ``None`` where the span does
        not carry it (a ``count`` is derived from its list and carries nothing back)."""
        form = self.form
        if form == "call_site":
            return call_site_text(attributes)
        value = attributes.get(self.key)
        if form == "text":
            return value or None
        if form == "json":
            return json.loads(value) if isinstance(value, str) else None
        if form == "count":
            return None
        if form == "members" and value is None:
            runs = attributes.get(model.PG_RANK_RANGES)
            return from_ranges(runs) if isinstance(runs, str) else None
        return value


SPAN_PLAN: Final = (
    SpanAttribute(key=model.RANK, column="rank", optional=False),
    SpanAttribute(key=model.PG_NAME, column="pg_name", optional=False),
    SpanAttribute(key=model.OP, column="op", optional=False),
    SpanAttribute(key=model.API, column="api"),
    SpanAttribute(key=model.STATE, column="state", form="text"),
    SpanAttribute(key=model.RECORD_ID, column="record_id", optional=False, per_span=True),
    SpanAttribute(key=model.INCIDENT, column="incident", optional=False),
    SpanAttribute(key=model.RUN_ID, column="run_id"),
    SpanAttribute(key=model.PG_DESC, column="pg_desc"),
    SpanAttribute(key=model.BACKEND, column="backend"),
    SpanAttribute(key=model.TIMEOUT_MS, column="timeout_ms"),
    SpanAttribute(key=model.PEER, column="peer"),
    SpanAttribute(key=model.INPUT_DTYPES, column="input_dtypes"),
    SpanAttribute(key=model.OUTPUT_DTYPES, column="output_dtypes"),
    SpanAttribute(key=model.PG_SIZE, column="pg_ranks", form="count"),
    SpanAttribute(key=model.PG_RANKS, column="pg_ranks", form="members"),
    # a send or recv has no cross-rank sequence number, a collective no p2p one
    SpanAttribute(key=model.P2P_SEQ_ID, column="p2p_seq_id", per_span=True, only="p2p"),
    SpanAttribute(
        key=model.COLLECTIVE_SEQ_ID, column="collective_seq_id", per_span=True, only="collective"
    ),
    SpanAttribute(key=model.INPUT_SIZES, column="input_sizes", form="json"),
    SpanAttribute(key=model.OUTPUT_SIZES, column="output_sizes", form="json"),
    SpanAttribute(key=model.CODE_FUNCTION, column="call_site", form="call_site"),
)
"""Every span attribute taken from a column, in the order spans carry them."""

TIME_COLUMNS: Final = ("time_created_ns", "time_completed_ns", "dump_time_ns")
"""What a span's start and end come from."""

ID_COLUMNS: Final = ("record_id", "collective_seq_id", "p2p_seq_id")
"""The per-span part of the trace and span ids (``model.trace_key``, ``model.span_id``)."""

RULE_COLUMNS: Final = (
    "job",
    "rank",
    "pg_name",
    "pg_ranks",
    "run_id",
    *ID_COLUMNS,
    "is_p2p",
    "op",
    "state",
    "backend",
    "retired",
    "timeout_ms",
    *TIME_COLUMNS,
)
"""Beyond the attributes, what the ids, point-to-point-ness (``schema.is_p2p_entry``),
completion (``schema.is_done_entry``), the times and the status read."""

RESOURCE_COLUMNS: Final = ("host",)
"""What a rank's resource takes from its rows (``rank_resource``): where it ran."""

SPAN_COLUMNS: Final = tuple(
    dict.fromkeys([*(a.column for a in SPAN_PLAN), *RULE_COLUMNS, *RESOURCE_COLUMNS])
)
"""Every column a span is built from."""


def rank_resource(extra: Mapping[str, str | int] | None, host: str | None) -> dict[str, str | int]:
    """The resource attributes a rank's spans get besides fr_otel's own
    (``model.resource_attributes``): ``extra``, with ``host.name`` the rank's rows say
    (they know each rank's host; a configured resource is one for every rank)."""
    resource = dict(extra or {})
    if host:
        resource[model.HOST_NAME] = host
    return resource


def _check(plan: tuple[SpanAttribute, ...]) -> None:
    """What the wire encoder relies on: per-span attributes are integers, written only where
    the column has a value (a required one from a column that is never null)."""
    for attribute in plan:
        field = RECORD_SCHEMA.field(attribute.column)
        if attribute.per_span and not (
            attribute.form == "value"
            and pa.types.is_int64(field.type)
            and (attribute.optional or not field.nullable)
        ):
            raise AssertionError(f"per-span attribute {attribute.key} must be a plain int64")


_check(SPAN_PLAN)


def _members_pair(key: str, ranks: list[int]) -> tuple[str, Any]:
    """A member list as itself when short, else as its runs."""
    if len(ranks) <= model.PG_RANKS_LISTED_MAX:
        return (key, ranks)
    runs = _runs(tuple(ranks))
    return (key, ranks) if runs is None else (model.PG_RANK_RANGES, runs)


@functools.lru_cache(maxsize=8)
def _runs(ranks: tuple[int, ...]) -> str | None:
    """``to_ranges`` of ``ranks``, once per group (an encoder meets the same few groups in
    every block, and a conversion walks the whole list: at 100,000 members it costs far
    more than the block's spans; a rank has few groups over 64 members, so 8 are kept);
    ``None`` for a list that is not plain non-negative ints, which no group has: it stays
    a list, nothing lost."""
    if not all(type(r) is int and r >= 0 for r in ranks):
        return None
    return to_ranges(ranks)


def call_site_attributes(text: str | None) -> list[tuple[str, Any]]:
    """``file:line in function`` -> the semantic-convention ``code.*`` attributes."""
    if not text:
        return []
    where, _, function = text.rpartition(" in ")
    path, _, line = where.rpartition(":")
    out: list[tuple[str, Any]] = [(model.CODE_FUNCTION, function), (model.CODE_FILE, path)]
    if line.isdigit():
        out.append((model.CODE_LINE, int(line)))
    return out


def call_site_text(attributes: dict[str, Any]) -> str | None:
    """``call_site_attributes``' inverse: ``file:line in function``, or ``None``."""
    function = attributes.get(model.CODE_FUNCTION)
    path = attributes.get(model.CODE_FILE)
    line = attributes.get(model.CODE_LINE)
    if function is None and path is None:
        return None
    where = f"{path or ''}:{line}" if line is not None else (path or "")
    return f"{where} in {function or ''}"


def error_type(
    *, retired: bool | None, timeout_ms: int | None, start_ns: int, dump_time_ns: int | None
) -> str:
    """``error.type`` of work that never finished: ``timeout`` when it was retired unfinished
    or pending past its timeout when the buffer was dumped, else ``not_completed``."""
    pending_ns = (dump_time_ns or start_ns) - start_ns
    timeout_ns = (timeout_ms or 0) * 1_000_000
    timed_out = bool(retired) or (timeout_ns and pending_ns >= timeout_ns)
    return model.ERROR_TIMEOUT if timed_out else model.ERROR_NOT_COMPLETED


def error_message(op: str, state: str | None) -> str:
    """The status message of work that never finished."""
    return f"{op} never completed ({state})"
