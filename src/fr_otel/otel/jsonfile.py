"""OTLP JSON lines files, as the Collector's ``otlpjsonfile`` receiver and file exporter
use them: one ``TracesData`` object per line, ids in hex, enums as integers, 64-bit
integers as decimal strings (opentelemetry-proto's JSON encoding rules)."""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _recode_ids(node: Any, convert: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str) and value:
                node[key] = convert(value)
            else:
                _recode_ids(value, convert)
    elif isinstance(node, list):
        for item in node:
            _recode_ids(item, convert)


def to_otlp_json(request: ExportTraceServiceRequest | TracesData) -> dict[str, Any]:
    """A request as an OTLP JSON object (protobuf's own JSON uses base64 ids and enum names)."""
    data: dict[str, Any] = json_format.MessageToDict(request, use_integers_for_enums=True)
    _recode_ids(data, lambda b64: base64.b64decode(b64).hex())
    return data


def from_otlp_json(data: dict[str, Any]) -> TracesData:
    """The inverse of ``to_otlp_json``."""
    data = json.loads(json.dumps(data))  # a copy we may change
    _recode_ids(data, lambda hexa: base64.b64encode(bytes.fromhex(hexa)).decode())
    traces: TracesData = json_format.ParseDict(data, TracesData(), ignore_unknown_fields=True)
    return traces


def json_attributes(items: Any) -> dict[str, Any]:
    """OTLP JSON attributes (a list of ``{"key", "value"}``) as a dict of Python values:
    what protobuf's parser makes of them, read as they are (``from_otlp_json`` builds the
    messages first, in pure Python: two thirds of a span import's time). Raises
    ``ValueError`` for what protobuf's parser refuses: a value of the wrong JSON type."""
    if items is None:
        return {}
    if not isinstance(items, list):
        raise ValueError(f"attributes are {_json_type(items)}, not a list")
    attributes: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"an attribute is {_json_type(item)}, not an object")
        key = item.get("key") or ""  # null: unset, as in protobuf's parser
        if not isinstance(key, str):
            raise ValueError(f"an attribute's key is {_json_type(key)}, not a string")
        attributes[key] = json_value(item.get("value"))
    return attributes


def json_value(value: Any) -> Any:
    """An OTLP JSON ``AnyValue`` as Python (``None`` when it holds none). Fields are
    accepted by their JSON and their proto names, unknown ones ignored, as
    protobuf's parser does with ``ignore_unknown_fields``."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"an attribute value is {_json_type(value)}, not an object")
    for name, item in value.items():
        read = _VALUE_FIELDS.get(name)
        if read is not None and item is not None:  # null: unset
            return read(item)
    return None


def json_int(value: Any, *, unsigned: bool = False) -> int:
    """A 64-bit integer field (``unsigned``: a ``fixed64``, as span times are): a number,
    or decimal text (how OTLP JSON writes them)."""
    number: int
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{value!r} is not an integer")
        number = int(value)
    elif isinstance(value, str | int):
        number = int(value)
    else:
        raise ValueError(f"{_json_type(value)} is not an integer")
    if not (0 if unsigned else -(2**63)) <= number < 2 ** (64 if unsigned else 63):
        raise ValueError(f"{number} is out of the 64-bit range")
    return number


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{_json_type(value)} is not a string")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{_json_type(value)} is not a boolean")
    return value


def _double(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{_json_type(value)} is not a number")
    number = float(value)
    if isinstance(value, str) and not math.isfinite(number) and value not in _NON_FINITE:
        raise ValueError(f"{value!r} is not a number")
    return number


def _bytes(value: Any) -> bytes:
    text = _text(value)
    try:  # as protobuf's parser reads them: either alphabet, padding optional
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:
        raise ValueError(f"bytes that are not base64: {exc}") from None


def _array(value: Any) -> list[Any]:
    values = json_list(value, "values")
    if None in values:
        raise ValueError("null in a list of values")
    return [json_value(item) for item in values]


def _kvlist(value: Any) -> dict[str, Any]:
    return json_attributes(json_list(value, "values"))


def json_field(data: Any, name: str, proto_name: str | None = None) -> Any:
    """Field ``name`` of a JSON object (or ``proto_name``, its proto spelling: protobuf's
    parser takes both); ``None`` when absent or null."""
    if not isinstance(data, dict):
        raise ValueError(f"{_json_type(data)} is not an object")
    value = data.get(name)
    return data.get(proto_name) if value is None and proto_name is not None else value


def json_object(data: Any, name: str, proto_name: str | None = None) -> dict[str, Any]:
    """Object field ``name`` of a JSON object (see ``json_field``); ``{}`` when absent."""
    value = json_field(data, name, proto_name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{name} is {_json_type(value)}, not an object")
    return value


def json_list(data: Any, name: str, proto_name: str | None = None) -> list[Any]:
    """List field ``name`` of a JSON object (see ``json_field``); ``[]`` when absent."""
    value = json_field(data, name, proto_name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{name} is {_json_type(value)}, not a list")
    return value


def _json_type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


_NON_FINITE = frozenset({"NaN", "Infinity", "-Infinity"})

_VALUE_FIELDS: dict[str, Callable[[Any], Any]] = {
    **{name: _text for name in ("stringValue", "string_value")},
    **{name: _bool for name in ("boolValue", "bool_value")},
    **{name: json_int for name in ("intValue", "int_value")},
    **{name: _double for name in ("doubleValue", "double_value")},
    **{name: _array for name in ("arrayValue", "array_value")},
    **{name: _kvlist for name in ("kvlistValue", "kvlist_value")},
    **{name: _bytes for name in ("bytesValue", "bytes_value")},
}


def write_otlp_json(requests: Iterable[ExportTraceServiceRequest], path: Path) -> int:
    """Write one line per request; return the number of spans written."""
    spans = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for request in requests:
            handle.write(json.dumps(to_otlp_json(request), separators=(",", ":")) + "\n")
            spans += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
    return spans


def read_otlp_json(path: Path) -> list[TracesData]:
    """Every ``TracesData`` line of an OTLP JSON lines file."""
    with path.open(encoding="utf-8") as handle:
        return [from_otlp_json(json.loads(line)) for line in handle if line.strip()]
