"""The in-rank recorder: ring buffer, incident detection and all-rank flush.

``fr_otel.install()`` (or ``fr-otel run -- torchrun ...``) is all a job needs; settings
come from the environment (``fr_otel.config``) and ``install``'s keyword arguments.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from fr_otel import config

if TYPE_CHECKING:  # at run time only install() imports it: importing this package stays light
    from fr_otel.recorder.recorder import Recorder

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_current: Recorder | None = None


def install(**overrides: Any) -> Recorder | None:
    """Record every collective of this process; flush all ranks when one has an incident.

    Call it before or after ``torch.distributed.init_process_group`` (before is better:
    torch reads the FR variables it sets when a group is created). Keyword arguments
    override the environment: ``mode``, ``buffer_size``, ``flush_deadline_s``,
    ``timeout_s``, ``stack_depth``, ``export_interval_s``, ``archive``, ``ring_dir``,
    ``job``, ``trigger_signal``, ``otlp`` (an ``OtlpSettings`` or None). A bad argument
    raises ``ConfigError``; calling it again returns the recorder already installed.
    Returns the ``Recorder``, or None when ``FR_OTEL_DISABLE`` is set.
    """
    global _current
    if config.recorder_disabled():
        return None
    with _lock:
        if _current is not None:
            return _current
        settings = config.recorder_settings(overrides)
        updates, warnings = config.torch_fr_environment(settings)
        for message in warnings:
            logger.warning("fr_otel: %s", message)
        os.environ.update(updates)
        from fr_otel.recorder.recorder import Recorder

        recorder = Recorder(settings)
        recorder.capture.patch()
        _current = recorder
    recorder.group_created()  # installed after init_process_group: start now
    return recorder


def current() -> Recorder | None:
    """The installed recorder, or None."""
    return _current


def uninstall() -> None:
    """Restore ``torch.distributed`` and stop the recorder's threads (tests, notebooks)."""
    global _current
    with _lock:
        if _current is not None:
            _current.capture.unpatch()
            _current.close()
            _current = None


__all__ = ["current", "install", "uninstall"]
