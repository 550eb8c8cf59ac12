"""Reading what torch writes: file discovery, a safe unpickler, dump -> canonical rows."""

from fr_otel.dumps.discover import DumpFile, discover
from fr_otel.dumps.load import LoadedDump, load_dump_file
from fr_otel.dumps.membership import Membership, apply_memberships, resolve_memberships

__all__ = [
    "DumpFile",
    "LoadedDump",
    "Membership",
    "apply_memberships",
    "discover",
    "load_dump_file",
    "resolve_memberships",
]
