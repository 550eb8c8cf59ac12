"""Reading the OTLP error details the exporters need from a serialized ``google.rpc.Status``:
its message, and ``RetryInfo``'s retry delay.

The details are google.rpc messages, whose Python classes live in googleapis-common-protos;
reading the three fields we need by hand avoids that dependency.
"""

from __future__ import annotations

from collections.abc import Iterator


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a serialized message: ints for varints, bytes otherwise."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire_type == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            yield number, data[pos : pos + length]
            pos += length
        elif wire_type == 1:
            yield number, data[pos : pos + 8]
            pos += 8
        elif wire_type == 5:
            yield number, data[pos : pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")


_RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"


def _bytes(fields: dict[int, int | bytes], number: int) -> bytes:
    value = fields.get(number, b"")
    return value if isinstance(value, bytes) else b""


def status_retry_delay(status: bytes) -> float | None:
    """The ``RetryInfo.retry_delay`` (seconds) in a serialized ``google.rpc.Status``."""
    try:
        for number, detail in _fields(status):
            if number != 3 or not isinstance(detail, bytes):  # Status.details: repeated Any
                continue
            any_fields = dict(_fields(detail))
            if _bytes(any_fields, 1).decode() != _RETRY_INFO_TYPE:
                continue
            retry_info = dict(_fields(_bytes(any_fields, 2)))
            duration = dict(_fields(_bytes(retry_info, 1)))  # RetryInfo.retry_delay
            seconds, nanos = duration.get(1, 0), duration.get(2, 0)
            if isinstance(seconds, int) and isinstance(nanos, int):
                if seconds >= 1 << 63:  # int64 on the wire: two's complement
                    seconds -= 1 << 64
                return max(0.0, seconds + nanos / 1e9)
    except (ValueError, UnicodeDecodeError):
        return None
    return None


def status_message(status: bytes) -> str | None:
    """``google.rpc.Status.message`` of a serialized status, if it parses as one."""
    try:
        for number, value in _fields(status):
            if number == 2 and isinstance(value, bytes):
                return value.decode("utf-8", errors="replace")
    except ValueError:
        return None
    return None
