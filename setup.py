"""Build hook for the recorder's optional C wrapper; everything else is in pyproject.toml.

The extension is optional: where it cannot be compiled (no compiler, Python 3.10, another
interpreter) the install still succeeds and the recorder uses its Python wrapper.
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
setup(
    ext_modules=[
        Extension(
            "fr_otel.recorder._fasthook",
            ["src/fr_otel/recorder/_fasthook.c"],
            optional=True,
        )
    ]
    if fast_path
    else []
)
