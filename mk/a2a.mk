# The A2A front's tests from npm (mk/a2a/package.json, pinned by its lock file): the
# protocol's JavaScript SDK, @a2a-js/sdk, whose client tests/a2a/js_client.mjs drives the
# sidecar with over JSON-RPC. Installed into .tools/a2a, again only when the lock file
# changes; the npm cache under .tools/ makes a second install offline.
#
# a2a-tools   npm ci of mk/a2a into .tools/a2a (`make pytest` runs it first).
# bench-a2a   python -m bench.micro.a2a: the same zero-latency turn through A2A's gRPC
#             binding (SendMessage, blocking, the a2a-sdk client) and through AgentService
#             (Run, our Python client), interleaved: latency and the sidecar's CPU per turn;
#             writes bench/results/a2a.md and .json. `make bench` runs it too, and quotes it
#             in docs/benchmarks.md.
A2A_TOOLS_DIR := .tools/a2a
A2A_TOOLS_SUM := $(shell cat mk/a2a/package.json mk/a2a/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
A2A_TOOLS := $(A2A_TOOLS_DIR)/node_modules/.installed-$(A2A_TOOLS_SUM)

.PHONY: a2a-tools bench-a2a

## a2a-tools: the A2A JavaScript SDK the tests drive the sidecar with, into .tools/a2a.
a2a-tools: $(A2A_TOOLS)

$(A2A_TOOLS): mk/a2a/package.json mk/a2a/package-lock.json
	mkdir -p $(A2A_TOOLS_DIR)
	cp mk/a2a/package.json mk/a2a/package-lock.json $(A2A_TOOLS_DIR)/
	cd $(A2A_TOOLS_DIR) && npm ci --cache $(CURDIR)/.tools/npm-cache --prefer-offline \
		--no-audit --no-fund --loglevel=error
	touch $@

# Prerequisites only; the recipe is the Makefile's.
pytest: $(A2A_TOOLS)

## bench-a2a: a turn through A2A (gRPC binding) against the same turn through AgentService
## (a minute or two).
bench-a2a: install
	$(PY) -m bench.micro.a2a

bench: bench-a2a

# a2a-tck     the A2A compatibility kit (third_party/a2a-tck: a2aproject/a2a-tck, branch
#             1.0-dev, pinned; see its PROVENANCE.md) into its own venv, .tools/a2a-tck,
#             again only when the copy changes. tests/a2a/test_tck.py runs it against a
#             real sidecar over the three bindings.
A2A_TCK_DIR := .tools/a2a-tck
A2A_TCK_SUM := $(shell find third_party/a2a-tck -type f -not -path '*/__pycache__/*' | sort | xargs cat 2>/dev/null | sha256sum | cut -c1-16)
A2A_TCK := $(A2A_TCK_DIR)/.installed-$(A2A_TCK_SUM)

.PHONY: a2a-tck

## a2a-tck: the A2A TCK (1.0 branch, vendored) in its own virtual environment.
a2a-tck: $(A2A_TCK)

$(A2A_TCK):
	rm -rf $(A2A_TCK_DIR)
	$(PYTHON) -m venv $(A2A_TCK_DIR)
	$(A2A_TCK_DIR)/bin/pip install -q ./third_party/a2a-tck
	touch $@

pytest: $(A2A_TCK)
