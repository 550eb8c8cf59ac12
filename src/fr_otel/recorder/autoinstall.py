"""Installing the recorder in processes started by ``fr-otel run``, with no code change.

``fr-otel run`` puts ``fr_otel/recorder/boot`` first on ``PYTHONPATH``; its
``sitecustomize.py`` calls ``activate()`` in every Python process of the job (torchrun's
agent, each rank, data-loader workers). Importing torch there would slow down every one
of them, so ``activate`` only arranges for ``install()`` to run the moment
``torch.distributed.distributed_c10d`` has been imported, before ``torch.distributed``
re-exports its functions: the ranks get the hooks, processes that never import
``torch.distributed`` pay nothing, and processes that never create a process group record
nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from fr_otel import config

logger = logging.getLogger(__name__)

TARGET = "torch.distributed.distributed_c10d"


def _install_quietly() -> None:
    try:
        from fr_otel.recorder import install

        install()
    except Exception as exc:  # a launcher must never break the job
        logger.warning("fr_otel: recorder not installed: %r", exc)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of ``TARGET`` to install afterwards."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        spec: importlib.machinery.ModuleSpec | None = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            _install_quietly()

        loader.exec_module = exec_module
        return spec


def activate() -> None:
    """Install now if torch.distributed is loaded, else as soon as it is."""
    if not config.autoinstall_requested():
        return
    if TARGET in sys.modules:
        _install_quietly()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
