from fr_otel.cli import entry

entry()
