# The tool-server libraries for TypeScript (toolservers/typescript) and Java
# (toolservers/java), each tested against real servers on 127.0.0.1.
#
# test-toolserver-typescript  npm ci (cache under .tools/), copy the contract into the
#                             package, tsc, then node --test.
TSS_DIR := toolservers/typescript
TSS_DEPS_SUM := $(shell cat $(TSS_DIR)/package.json $(TSS_DIR)/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
TSS_DEPS := $(TSS_DIR)/node_modules/.installed-$(TSS_DEPS_SUM)

CLIENT_TEST += test-toolserver-typescript

.PHONY: build-toolserver-typescript test-toolserver-typescript

$(TSS_DEPS):
	cd $(TSS_DIR) && npm ci --cache $(TS_NPM_CACHE) --prefer-offline --no-audit --no-fund --loglevel=error
	touch $@

## build-toolserver-typescript: compile the TypeScript tool-server library and its tests.
build-toolserver-typescript: $(TSS_DEPS)
	cd $(TSS_DIR) && npm run --silent build

## test-toolserver-typescript: test the TypeScript tool-server library against real servers.
test-toolserver-typescript: install $(GRPCURL_STAMP) build-toolserver-typescript
	cd $(TSS_DIR) && AGENT_SIDECAR_PYTHON=$(CURDIR)/$(PY) npm test --silent
