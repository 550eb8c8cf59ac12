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
_here = os.path.dirname(os.path.abspath(__file__))
_rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None and _spec.origin != os.path.abspath(__file__):
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
