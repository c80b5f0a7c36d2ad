# One entry point for every task. Each target installs what it needs first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
BUF_VERSION := 1.75.0
BUF    := .tools/node_modules/.bin/buf
GEN_PY := clients/python
# $(call buf_generate,DIR...): buf generate with the plugins of protos/buf.gen.yaml (the one
# template of every client) that write under DIR; buf alone would run all of them.
buf_generate = $(BUF) generate --template "$$($(PY) protos/tools/template.py $(1))"

# Each client language and the chart add their targets in mk/NAME.mk, appending to
# CLIENT_GEN (generate committed code), CLIENT_CHECK (fail when it drifts) and
# CLIENT_TEST (build and test against a real sidecar).
CLIENT_GEN :=
CLIENT_CHECK :=
CLIENT_TEST :=
-include mk/*.mk


.PHONY: fuzz
.PHONY: install install-bench demo test lint proto proto-check buf-lint pytest bench soak clean \
	bench-telemetry bench-context bench-identity bench-guard profile bench-startup bench-control-plane bench-mcp bench-recording latency-bill postgres clients clients-test prereqs prereqs-demo

## prereqs: what `make test` needs from the machine (Python 3.11+, Node.js 20+, Go, a JDK 17+
## and Maven, etcd, PostgreSQL's server binaries): one line per missing tool, naming what
## to install. The last three make installs itself when it runs as root on Debian.
prereqs:
	@sh mk/prereqs.sh test

prereqs-demo:
	@sh mk/prereqs.sh demo

install: $(VENV)/.installed

# setuptools reports every editable install with a framed "Editable installation" notice
# (about folders named like a package), which reads like an error and is none: hidden.
# Every other warning, and every error, still shows.
EDITABLE_PIP := PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install -q -e

$(VENV)/.installed: pyproject.toml
	@echo "installing the Python dependencies into $(VENV) (about 3 min on a fresh machine)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(EDITABLE_PIP) '.[dev]'
	touch $@

install-bench: $(VENV)/.bench-installed

$(VENV)/.bench-installed: $(VENV)/.installed
	$(EDITABLE_PIP) '.[dev,bench]'
	touch $@

## bench: the micro benchmarks (bench-model, bench-unix, bench-startup, bench-control-plane, bench-mcp,
## bench-recording, profile), then the benchmark against the peers, which writes
## docs/benchmarks.md quoting them (about 17 minutes).
bench: install-bench bench-startup bench-control-plane bench-mcp bench-recording profile
	$(PY) -m bench.peers

## bench-mcp: a tool call through the MCP bridge against the same tool served natively, and
## an MCP host's call through the sidecar against direct calls; writes bench/results/mcp.md
## (about two minutes).
bench-mcp: install
	$(PY) -m bench.micro.mcp


## soak: 500 concurrent sessions for 60 s, then chaos under that load; writes
## docs/benchmarks-soak.md and bench/results/soak.json (about 6 minutes).
soak: install
	$(PY) -m bench.soak

## postgres: PostgreSQL's server binaries (Debian's package), which the tests of the shared
## session store start on a private port. Installed only when missing; needs root.
postgres:
	@if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's postgresql package (server binaries for the shared-store tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends postgresql >/dev/null; \
	else \
		echo "PostgreSQL's server binaries (initdb, pg_ctl) are missing: install Debian's" \
			"postgresql package (apt-get install postgresql) or put them on PATH"; \
		exit 1; \
	fi

## bench-guard: the speed guard: the sidecar's and its tool server's CPU per run against the
## in-process floor, measured side by side; fails above the budget in bench/guard.json (about
## 40 s; .ci/run runs it after the tests).
bench-guard: install
	$(PY) -m bench.guard

## profile: where a zero-latency run's CPU goes: py-spy on the sidecar and its tool server
## under load, summed by the part of the run that asked for the work (about 30 s).
profile: install-bench
	$(PY) -m bench.profile

## bench-startup: serve to ready (listening, SERVING, first run), the gRPC front alone and
## every front configured (about 1 min); writes bench/results/startup.json and .md.
bench-startup: install
	$(PY) -m bench.micro.startup

## bench-control-plane: CreateSession and GetSession latency, idle and while 32 turns run.
bench-control-plane: install
	$(PY) -m bench.micro.control_plane

## bench-context: a 50-turn session with the context window on and off (about 30 s).
bench-context: install-bench
	$(PY) -m bench.micro.context_window

$(BUF):
	mkdir -p .tools
	cd .tools && npm install --silent --no-audit --no-fund --prefix . @bufbuild/buf@$(BUF_VERSION)

## demo: start the example tool servers and run the agent demo end to end.
demo: prereqs-demo install
	$(PY) -m sidecar demo

## bench-telemetry: what metrics, tracing and the timeline log cost per run (about 30 s).
bench-telemetry: install
	$(PY) -m bench.micro.telemetry_overhead

## bench-recording: what a recorded run costs (record: 1) against recording off (about 1 min).
bench-recording: install
	$(PY) -m bench.micro.recording_cost

## bench-identity: what the identity metadata and the assertion cost a tool call (about 1 min).
bench-identity: install
	$(PY) -m bench.micro.tool_identity

## latency-bill: log demo runs, print their latency bill, chart it to docs/latency-bill.png.
latency-bill: install
	$(PY) -m bench.micro.latency_bill

## proto: regenerate the Python code (clients/python/agentsidecar/v1) from protos/.
proto: install $(BUF)
	rm -f $(GEN_PY)/agentsidecar/v1/*_pb2.py $(GEN_PY)/agentsidecar/v1/*_pb2.pyi \
		$(GEN_PY)/agentsidecar/v1/*_pb2_grpc.py
	$(call buf_generate,$(GEN_PY))

## proto-check: fail when the committed generated code differs from protos/.
proto-check: install $(BUF)
	rm -rf .gen-check
	$(call buf_generate,$(GEN_PY)) --output .gen-check
	diff -r -x __init__.py -x __pycache__ -x py.typed .gen-check/$(GEN_PY)/agentsidecar/v1 $(GEN_PY)/agentsidecar/v1 \
		|| (echo "generated code is stale: run 'make proto' and commit" && exit 1)
	rm -rf .gen-check

buf-lint: $(BUF)
	cd protos && ../$(BUF) lint

lint: install buf-lint
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	@echo "mypy (about 2 min without its cache in .mypy_cache, seconds with it)"
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

pytest: install $(BUF) postgres
	$(PY) -m pytest -q

## clients: generate every client's committed code from protos/.
clients: proto $(CLIENT_GEN)

## clients-test: build every client and test it against a real sidecar.
clients-test: $(CLIENT_CHECK) $(CLIENT_TEST)

## fuzz: the property-based suites with many random examples (HYPOTHESIS_EXAMPLES, default
## 3000 each; `make test` runs 60 fixed ones).
fuzz: install postgres
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -m property --timeout 3600 \
		--hypothesis-show-statistics

## test: every check: generated code, lint, types, the test suite, the clients; first, the
## machine's prerequisites. Every step runs even when one before it failed; the end lists
## each step's time and what failed (mk/steps.sh).
test: prereqs
	@mk/steps.sh proto-check lint pytest $(CLIENT_CHECK) $(CLIENT_TEST)

clean:
	rm -rf $(VENV) .tools .gen-check .pytest_cache .mypy_cache .ruff_cache
