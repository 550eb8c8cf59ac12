"""Loaded by every Python process ``fr-otel run`` starts (its folder leads PYTHONPATH)."""

import importlib.machinery
import importlib.util
import os
import sys

try:
    from fr_otel.recorder.autoinstall import activate

    activate()
except Exception as exc:  # never break the user's process
    sys.stderr.write(f"fr_otel: recorder not activated: {exc!r}\n")

# Ours shadows any other sitecustomize on the path: run the next one, as Python would have.
_BOOT = os.path.join("fr_otel", "recorder", "boot", "sitecustomize.py")


def _ours(folder: str) -> bool:
    """Any fr_otel boot folder, under any name (a symlink, another install)."""
    candidate = os.path.realpath(os.path.join(folder or os.curdir, "sitecustomize.py"))
    return candidate.endswith(os.sep + _BOOT)


_rest = [p for p in sys.path if not _ours(p)]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
