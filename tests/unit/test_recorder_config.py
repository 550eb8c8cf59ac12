"""The recorder's part of ``fr_otel.config``: settings, torch's FR variables, kill switches.

Pure functions over explicit ``environ`` dicts: nothing is faked and the process
environment is neither read nor changed (each test passes its own mapping).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from fr_otel import config
from fr_otel.errors import ConfigError


def test_defaults_with_an_empty_environment() -> None:
    settings = config.recorder_settings(None, {})
    assert settings == config.RecorderSettings()
    assert settings.mode == "incident"
    assert settings.buffer_size == 20_000
    assert settings.flush_deadline_s == 5.0
    assert settings.timeout_s is None
    assert settings.stack_depth == 8
    assert settings.export_interval_s == 1.0
    assert settings.archive == Path("fr-otel-archive")
    assert settings.ring_dir is None
    assert settings.job == "default"
    assert settings.trigger_signal == "SIGUSR2"
    assert settings.otlp is None
    assert settings.rings == Path("fr-otel-archive") / "_rings"
    assert settings.spool_dir == Path("fr-otel-archive") / "_spool"


ENVIRON = {
    "FR_OTEL_MODE": "Continuous",
    "FR_OTEL_BUFFER_SIZE": "64",
    "FR_OTEL_FLUSH_DEADLINE": "2.5",
    "FR_OTEL_TIMEOUT": "30",
    "FR_OTEL_STACK_DEPTH": "3",
    "FR_OTEL_EXPORT_INTERVAL": "0.5",
    "FR_OTEL_ARCHIVE": "/data/arch",
    "FR_OTEL_RING_DIR": "/local/rings",
    "FR_OTEL_JOB": "llama",
    "FR_OTEL_TRIGGER_SIGNAL": "SIGUSR1",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
}


def test_environment_beats_defaults() -> None:
    settings = config.recorder_settings({}, ENVIRON)
    assert settings.mode == "continuous"
    assert settings.buffer_size == 64
    assert settings.flush_deadline_s == 2.5
    assert settings.timeout_s == 30.0
    assert settings.stack_depth == 3
    assert settings.export_interval_s == 0.5
    assert settings.archive == Path("/data/arch")
    assert settings.rings == Path("/local/rings")
    assert settings.spool_dir == Path("/data/arch/_spool")  # the spool stays in the archive
    assert settings.job == "llama"
    assert settings.trigger_signal == "SIGUSR1"
    assert settings.otlp is not None
    assert settings.otlp.endpoint == "http://collector:4318/v1/traces"


def test_overrides_beat_the_environment() -> None:
    overrides: dict[str, Any] = {
        "mode": "incident",
        "buffer_size": 7,
        "flush_deadline_s": 1,
        "timeout_s": None,
        "stack_depth": 1,
        "export_interval_s": 3,
        "archive": "/other",
        "ring_dir": None,
        "job": "mine",
        "trigger_signal": "SIGUSR2",
        "otlp": None,
    }
    settings = config.recorder_settings(overrides, ENVIRON)
    assert settings.mode == "incident"
    assert settings.buffer_size == 7
    assert settings.flush_deadline_s == 1.0 and isinstance(settings.flush_deadline_s, float)
    assert settings.timeout_s is None  # None means "the group's own", even over the env
    assert settings.stack_depth == 1
    assert settings.export_interval_s == 3.0
    assert settings.archive == Path("/other")
    assert settings.ring_dir is None and settings.rings == Path("/other/_rings")
    assert settings.job == "mine"
    assert settings.trigger_signal == "SIGUSR2"
    assert settings.otlp is None  # explicit None wins over the endpoint in the env


def test_partial_overrides_keep_the_rest_from_the_environment() -> None:
    settings = config.recorder_settings({"buffer_size": 5}, ENVIRON)
    assert settings.buffer_size == 5
    assert settings.job == "llama" and settings.stack_depth == 3


@pytest.mark.parametrize(
    ("variable", "value", "field", "default"),
    [
        ("FR_OTEL_MODE", "turbo", "mode", "incident"),
        ("FR_OTEL_BUFFER_SIZE", "lots", "buffer_size", 20_000),
        ("FR_OTEL_BUFFER_SIZE", "0", "buffer_size", 20_000),
        ("FR_OTEL_BUFFER_SIZE", "1.5", "buffer_size", 20_000),
        ("FR_OTEL_FLUSH_DEADLINE", "-1", "flush_deadline_s", 5.0),
        ("FR_OTEL_FLUSH_DEADLINE", "inf", "flush_deadline_s", 5.0),
        ("FR_OTEL_TIMEOUT", "soon", "timeout_s", None),
        ("FR_OTEL_TIMEOUT", "0", "timeout_s", None),
        ("FR_OTEL_STACK_DEPTH", "-3", "stack_depth", 8),
        ("FR_OTEL_EXPORT_INTERVAL", "nan", "export_interval_s", 1.0),
        ("FR_OTEL_JOB", "a/b", "job", "default"),
    ],
)
def test_bad_environment_values_warn_and_fall_back(
    caplog: pytest.LogCaptureFixture, variable: str, value: str, field: str, default: Any
) -> None:
    with caplog.at_level(logging.WARNING, logger="fr_otel.config"):
        settings = config.recorder_settings({}, {variable: value})
    assert getattr(settings, field) == default
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and variable in warnings[0].getMessage()


def test_blank_environment_values_are_unset(caplog: pytest.LogCaptureFixture) -> None:
    environ = {name: "  " for name in config.RECORDER_VARIABLES}
    with caplog.at_level(logging.WARNING, logger="fr_otel.config"):
        settings = config.recorder_settings({}, environ)
    assert settings.buffer_size == 20_000 and settings.ring_dir is None
    assert caplog.records == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("mode", "turbo"),
        ("buffer_size", 0),
        ("buffer_size", "64"),
        ("buffer_size", 2.5),
        ("stack_depth", -1),
        ("flush_deadline_s", 0),
        ("flush_deadline_s", "5"),
        ("export_interval_s", -0.5),
        ("timeout_s", 0),
        ("export_interval_s", None),
        ("job", "a b"),
        ("job", "../up"),
    ],
)
def test_bad_overrides_raise_naming_the_setting(name: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=name.split("_")[0]):
        config.recorder_settings({name: value}, {})


def test_unknown_override_names_raise() -> None:
    with pytest.raises(ConfigError, match="bufer_size"):
        config.recorder_settings({"bufer_size": 10}, {})


@pytest.mark.parametrize("value", ["none", "NONE", " None ", "0", ""])
def test_trigger_signal_none_in_the_environment_disables(value: str) -> None:
    settings = config.recorder_settings({}, {"FR_OTEL_TRIGGER_SIGNAL": value})
    assert settings.trigger_signal is None


def test_trigger_signal_none_as_an_override_disables() -> None:
    assert config.recorder_settings({"trigger_signal": "none"}, {}).trigger_signal is None


def test_relative_ring_dir_and_archive_stay_as_given() -> None:
    settings = config.recorder_settings({}, {"FR_OTEL_ARCHIVE": "arch", "FR_OTEL_RING_DIR": "r"})
    assert settings.archive == Path("arch") and settings.rings == Path("r")


# --- torch's Flight Recorder variables ---------------------------------------------------


def _settings(tmp_path: Path, **overrides: Any) -> config.RecorderSettings:
    return config.recorder_settings({"archive": tmp_path, "job": "j", **overrides}, {})


def test_torch_environment_sets_what_is_unset(tmp_path: Path) -> None:
    environ: dict[str, str] = {"PATH": "/bin"}
    updates, warnings = config.torch_fr_environment(_settings(tmp_path, buffer_size=123), environ)
    assert updates == {
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "_rings" / "job=j" / "comm_lib_trace_rank_"),
    }
    assert warnings == []
    assert environ == {"PATH": "/bin"}  # a pure function: the caller applies the updates


def test_torch_dump_file_is_absolute_for_a_relative_archive(tmp_path: Path) -> None:
    settings = config.recorder_settings({"archive": "rel", "job": "j"}, {})
    updates, _ = config.torch_fr_environment(settings, {})
    path = Path(updates["TORCH_FR_DUMP_TEMP_FILE"])
    assert path.is_absolute()
    assert path.parts[-4:] == ("rel", "_rings", "job=j", "comm_lib_trace_rank_")


def test_torch_environment_leaves_the_users_values_and_aliases(tmp_path: Path) -> None:
    for environ in (
        {
            "TORCH_FR_BUFFER_SIZE": "5",
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
            "TORCH_FR_DUMP_TEMP_FILE": "/mine/fr_",
        },
        {
            "TORCH_NCCL_TRACE_BUFFER_SIZE": "5",
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/mine/nccl_trace_rank_",
        },
    ):
        updates, warnings = config.torch_fr_environment(_settings(tmp_path), environ)
        assert updates == {}, environ
        assert warnings == []


@pytest.mark.parametrize(
    ("value", "raised"), [("1", True), (" 1 ", True), ("3", False), ("0", False), ("", False)]
)
def test_async_error_handling_1_is_raised_to_3(tmp_path: Path, value: str, raised: bool) -> None:
    environ = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": value}
    updates, warnings = config.torch_fr_environment(_settings(tmp_path), environ)
    if raised:
        assert updates["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
        assert len(warnings) == 1 and "121055" in warnings[0]
        assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" in warnings[0]
    else:
        assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in updates
        assert warnings == []


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"TORCH_FR_DUMP_TEMP_FILE": "  "}, None),
        ({"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/n/trace_"}, "/n/trace_"),
        ({"TORCH_FR_DUMP_TEMP_FILE": "/f/fr_"}, "/f/fr_"),
        (
            {"TORCH_FR_DUMP_TEMP_FILE": "/f/fr_", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/n/x"},
            "/f/fr_",
        ),
        ({"TORCH_FR_DUMP_TEMP_FILE": " ", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/n/x"}, "/n/x"),
    ],
)
def test_torch_dump_prefix(environ: dict[str, str], expected: str | None) -> None:
    assert config.torch_dump_prefix(environ) == expected


def test_torch_dump_prefix_reads_back_what_torch_environment_set(tmp_path: Path) -> None:
    updates, _ = config.torch_fr_environment(_settings(tmp_path), {})
    assert config.torch_dump_prefix(updates) == updates["TORCH_FR_DUMP_TEMP_FILE"]


# --- kill switch and autoinstall ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "disabled"),
    [
        ("1", True),
        ("true", True),
        (" YES ", True),
        ("True", True),
        ("0", False),
        ("no", False),
        ("", False),
        (None, False),
    ],
)
def test_recorder_disabled(value: str | None, disabled: bool) -> None:
    environ = {} if value is None else {"FR_OTEL_DISABLE": value}
    assert config.recorder_disabled(environ) is disabled


@pytest.mark.parametrize(
    ("environ", "requested"),
    [
        ({}, False),
        ({"FR_OTEL_AUTOINSTALL": "1"}, True),
        ({"FR_OTEL_AUTOINSTALL": "0"}, False),
        ({"FR_OTEL_AUTOINSTALL": "true"}, False),  # set by fr-otel run, exactly "1"
        ({"FR_OTEL_AUTOINSTALL": "1", "FR_OTEL_DISABLE": "1"}, False),
        ({"FR_OTEL_AUTOINSTALL": "1", "FR_OTEL_DISABLE": "0"}, True),
    ],
)
def test_autoinstall_requested(environ: dict[str, str], requested: bool) -> None:
    assert config.autoinstall_requested(environ) is requested


def test_recorder_variables_are_documented_variables() -> None:
    assert set(config.RECORDER_VARIABLES) <= set(config.ALL_VARIABLES)
    assert "FR_OTEL_AUTOINSTALL" in config.ALL_VARIABLES


def test_otel_resource_attributes_keep_their_case_and_decode() -> None:
    from fr_otel.config import recorder_settings, resource_attributes

    env = {"OTEL_RESOURCE_ATTRIBUTES": "k8s.pod.name=trainer-0,Team=ML%20Infra,broken"}
    assert resource_attributes(env) == {"k8s.pod.name": "trainer-0", "Team": "ML Infra"}
    assert resource_attributes({}) == {}
    assert recorder_settings(environ=env).resource == resource_attributes(env)
    assert recorder_settings({"resource": {"a": "b"}}, environ=env).resource == {"a": "b"}


def test_the_run_id_comes_from_fr_otel_then_torchrun_and_never_from_its_default() -> None:
    from fr_otel.config import new_run_id, run_id

    assert run_id({"FR_OTEL_RUN_ID": "r1", "TORCHELASTIC_RUN_ID": "t1"}) == "r1"
    assert run_id({"TORCHELASTIC_RUN_ID": "5f0c-9a"}) == "5f0c-9a"
    assert run_id({"TORCHELASTIC_RUN_ID": "none"}) is None  # torchrun's default
    assert run_id({"FR_OTEL_RUN_ID": "../up"}) is None  # not a folder name: warned, ignored
    assert run_id({}) is None
    made = {new_run_id() for _ in range(50)}
    assert len(made) == 50 and all(run_id({"FR_OTEL_RUN_ID": m}) == m for m in made)


def test_incident_ids_carry_the_runs_random_part() -> None:
    from fr_otel.recorder.incident_ids import new_incident_id

    with_run = new_incident_id("r3", "timeout", "20261201T064000Z-3fa2b1c0")
    assert with_run.endswith("-3fa2b1c0-r3-timeout"), with_run
    assert new_incident_id("launcher", "job_failed", None).endswith("Z-launcher-job_failed")
