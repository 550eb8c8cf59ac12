"""``python -m fr_otel.run [OPTIONS] -- CMD ...``: the same as ``fr-otel run``."""

from __future__ import annotations

import sys

from fr_otel.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
