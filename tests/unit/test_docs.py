"""The docs tell the truth: schema doc, commands and variables stay in step with the code."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fr_otel import config
from fr_otel.cli import cli
from fr_otel.schema import RECORD_SCHEMA, schema_markdown

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_schema_doc_is_generated_from_the_schema() -> None:
    assert (ROOT / "docs" / "schema.md").read_text() == schema_markdown(), "run `make docs`"


def test_issue_required_columns_exist() -> None:
    required = {
        *("job", "incident", "rank", "pg_name", "pg_desc", "pg_ranks", "pg_ranks_inferred"),
        *("record_id", "collective_seq_id", "p2p_seq_id", "op_id", "backend", "op", "peer"),
        *("input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "state"),
        *("time_created_ns", "time_started_ns", "time_completed_ns", "duration_ms", "retired"),
        *("timeout_ms", "is_p2p", "thread_name", "thread_id", "frames", "source_file"),
        *("source_format", "fr_version"),
    }
    assert required <= set(RECORD_SCHEMA.names)


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_command_is_in_the_readme_and_has_help(name: str) -> None:
    assert f"`fr-otel {name}" in README
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert len(result.output.splitlines()) > 3


@pytest.mark.parametrize("variable", config.ALL_VARIABLES)
def test_every_variable_is_in_the_readme(variable: str) -> None:
    assert f"| `{variable}` |" in README


def test_every_span_attribute_is_in_the_span_model_doc() -> None:
    from fr_otel.otel import model

    doc = (ROOT / "docs" / "span-model.md").read_text()
    assert [a for a in model.SPAN_ATTRIBUTES if f"`{a}`" not in doc] == []
