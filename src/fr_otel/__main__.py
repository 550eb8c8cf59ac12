import sys

from fr_otel.cli import main

sys.exit(main())
