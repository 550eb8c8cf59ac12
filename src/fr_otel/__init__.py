"""fr_otel: PyTorch Flight Recorder data as Parquet, DuckDB analysis and OpenTelemetry spans."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typed names for checkers; at run time __getattr__ imports them on use
    from fr_otel.analysis import analyze
    from fr_otel.archive import import_dumps
    from fr_otel.recorder import install
    from fr_otel.schema import RECORD_SCHEMA
    from fr_otel.sinks import export

__version__ = "0.1.0"

TORCH_EXTRA_HINT = (
    "install fr_otel's torch extra: from a clone of fr_otel, pip install '.[torch]'"
    " (torch and numpy)"
)
"""What to do when torch is missing (fr_otel is not on PyPI)."""

__all__ = ["RECORD_SCHEMA", "__version__", "analyze", "export", "import_dumps", "install"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `fr-otel` and light users do not pay for pyarrow and duckdb up front.
    if name == "RECORD_SCHEMA":
        from fr_otel.schema import RECORD_SCHEMA

        return RECORD_SCHEMA
    if name == "analyze":
        from fr_otel.analysis import analyze

        return analyze
    if name == "install":
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            raise ModuleNotFoundError(
                "fr_otel.install() records torch.distributed, and torch is not installed:"
                f" {TORCH_EXTRA_HINT}",
                name="torch",
            )
        from fr_otel.recorder import install

        return install
    if name == "export":
        from fr_otel.sinks import export

        return export
    if name == "import_dumps":
        from fr_otel.archive import import_dumps

        return import_dumps
    raise AttributeError(f"module 'fr_otel' has no attribute {name!r}")
