"""Build hook for the optional C extensions; everything else is in pyproject.toml.

All are optional: where one cannot be compiled (no compiler, Python 3.10, another
interpreter) the install still succeeds. Without ``_fasthook`` the recorder uses its Python
wrapper; without ``_lastgasp`` a rank that dies of SIGABRT keeps only what the recorder had
copied from torch's Flight Recorder before; without ``_pickle_columns`` every dump is read
by the restricted unpickler, the slower general path.
"""

import platform
import sys
import sysconfig

from setuptools import Extension, setup

fast_path = (
    sys.version_info >= (3, 11)
    and platform.python_implementation() == "CPython"
    and not sysconfig.get_config_var("Py_GIL_DISABLED")  # it relies on the GIL
)
last_gasp = platform.python_implementation() == "CPython" and sys.platform != "win32"
extensions = []
if fast_path:
    extensions.append(
        Extension("fr_otel.recorder._fasthook", ["src/fr_otel/recorder/_fasthook.c"], optional=True)
    )
if last_gasp:
    extensions.append(
        Extension("fr_otel.recorder._lastgasp", ["src/fr_otel/recorder/_lastgasp.c"], optional=True)
    )
if platform.python_implementation() == "CPython":
    extensions.append(
        Extension(
            "fr_otel.dumps._pickle_columns",
            ["src/fr_otel/dumps/_pickle_columns.c"],
            optional=True,
        )
    )
setup(ext_modules=extensions)
