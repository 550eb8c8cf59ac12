# Two commands on a fresh machine:  make demo  |  make test
# Each creates .venv with the pinned environment the first time.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean fixtures docs dashboards chromium e2e-tools alerting-tools java

$(STAMP): requirements-dev.txt pyproject.toml setup.py src/fr_otel/recorder/_fasthook.c src/fr_otel/recorder/_lastgasp.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps -e .
	# as pip compiles a regular install: without it, where no bytecode cache can be
	# written (PYTHONDONTWRITEBYTECODE), every process compiles fr_otel again (0.09 s)
	$(BIN)/python -m compileall -q src
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fr-otel demo --out demo-out

test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks deploy
	$(BIN)/ruff format --check src tests benchmarks deploy

typecheck: $(STAMP)
	$(BIN)/mypy src

# --durations: the slowest tests, in every CI log (the whole run must stay within its limit)
unit: $(STAMP) chromium e2e-tools alerting-tools java
	$(BIN)/pytest -q --durations=30

# The browser tests open the HTML report in Debian's chromium (no browser download:
# Playwright drives the system one). Installed here when missing and apt can.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian's chromium for the browser tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo -n ); \
		$$SUDO apt-get install -y -qq chromium >/dev/null 2>&1 || \
		{ $$SUDO apt-get update -qq >/dev/null && $$SUDO apt-get install -y -qq chromium >/dev/null; }; }
	@command -v chromium >/dev/null 2>&1 || { \
		echo "the browser tests need chromium: apt-get install chromium" >&2; exit 1; }

# The fleet views' Spark tests (tests/unit/test_fleet_spark.py) run Spark in local mode,
# which needs Java 17 or later: Debian's, installed when missing and apt can.
java:
	@command -v java >/dev/null 2>&1 || { \
		echo "installing Debian's Java 17 runtime for the Spark tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo -n ); \
		$$SUDO apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null 2>&1 || \
		{ $$SUDO apt-get update -qq >/dev/null && \
			$$SUDO apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null; }; }
	@command -v java >/dev/null 2>&1 || { \
		echo "the Spark tests need Java 17: apt-get install openjdk-17-jre-headless" >&2; exit 1; }

# The alert rules' checks (promtool) and the alert end-to-end test's real Prometheus and
# Alertmanager: Debian's packages, installed when missing and apt can. Only their binaries
# are used: a policy-rc.d that refuses every start keeps their services from starting
# (it is removed again unless it was there before).
ALERTING_BINARIES := /usr/bin/prometheus /usr/bin/promtool /usr/bin/prometheus-alertmanager \
	/usr/bin/amtool
alerting-tools:
	@ls $(ALERTING_BINARIES) >/dev/null 2>&1 || { \
		echo "installing Debian's prometheus and prometheus-alertmanager for the alert tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo -n ); \
		POLICY=/usr/sbin/policy-rc.d; OWN=; \
		[ -e $$POLICY ] || { printf '#!/bin/sh\nexit 101\n' | $$SUDO tee $$POLICY >/dev/null && \
			$$SUDO chmod 755 $$POLICY && OWN=1; }; \
		PKGS="prometheus prometheus-alertmanager"; \
		$$SUDO apt-get install -y -qq --no-install-recommends $$PKGS >/dev/null 2>&1 || \
		{ $$SUDO apt-get update -qq >/dev/null && \
			$$SUDO apt-get install -y -qq --no-install-recommends $$PKGS >/dev/null; }; \
		STATUS=$$?; [ -z "$$OWN" ] || $$SUDO rm -f $$POLICY; exit $$STATUS; }
	@ls $(ALERTING_BINARIES) >/dev/null 2>&1 || { \
		echo "the alert tests need promtool, prometheus, alertmanager and amtool:" \
			"apt-get install prometheus prometheus-alertmanager" >&2; exit 1; }

# The end-to-end tests' real Collector and Jaeger (tests/e2e/), built with Go from the
# module proxy into build/bin: our Collector distribution from collector-config/builder.yaml
# (ocb, pinned in tools/ocb/go.mod) and Jaeger v2 (pinned in tools/jaeger/go.mod). Go's
# module and build caches ($$(go env GOMODCACHE), $$(go env GOCACHE)) are reused; the
# binaries are rebuilt only when their inputs change.
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
# ocb runs `go` itself: put ours first on PATH
GOENV := PATH="$(dir $(GO)):$$PATH" GOFLAGS=-buildvcs=false
GOBUILD := $(GOENV) $(GO) build -trimpath -ldflags='-s -w'
E2E_BIN := build/bin
OCB := $(E2E_BIN)/ocb
OTELCOL := $(E2E_BIN)/otelcol-fr-otel
JAEGER := $(E2E_BIN)/jaeger

e2e-tools: $(OTELCOL) $(JAEGER)

$(OCB): tools/ocb/go.mod tools/ocb/go.sum
	cd tools/ocb && $(GOBUILD) -o ../../$(OCB) go.opentelemetry.io/collector/cmd/builder

$(OTELCOL): collector-config/builder.yaml $(OCB)
	$(GOENV) $(OCB) --config collector-config/builder.yaml --skip-strict-versioning=false
	cp build/otelcol-fr-otel/otelcol-fr-otel $(OTELCOL).new && mv -f $(OTELCOL).new $(OTELCOL)

$(JAEGER): tools/jaeger/go.mod tools/jaeger/go.sum
	cd tools/jaeger && $(GOBUILD) -o ../../$(JAEGER) github.com/jaegertracing/jaeger/cmd/jaeger

bench: $(STAMP)
	$(BIN)/python benchmarks/import_throughput.py
	$(BIN)/python benchmarks/analyze_vs_fr_trace.py
	$(BIN)/python benchmarks/flush_vs_sdk.py
	$(BIN)/python benchmarks/recorder_overhead.py
	$(BIN)/python benchmarks/report_render.py

fixtures: $(STAMP)
	$(BIN)/python tests/data/generate_gloo.py

dashboards: $(STAMP)
	$(BIN)/python deploy/grafana/generate.py

docs: $(STAMP)
	$(BIN)/python -c 'from fr_otel.schema import schema_markdown as m; print(m(), end="")' > docs/schema.md
	$(BIN)/python -c 'import pathlib; from fr_otel.analysis.kinds import with_kinds_section as w; p = pathlib.Path("docs/analysis.md"); p.write_text(w(p.read_text()))'

clean:
	rm -rf $(VENV) build demo-out bench-out test-artifacts .pytest_cache .mypy_cache .ruff_cache
