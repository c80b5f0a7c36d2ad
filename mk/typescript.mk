# The TypeScript client (clients/typescript): npm ci into its node_modules (cache under
# .tools/), generate its code from protos/ with buf and ts-proto, compile with tsc, then run
# its tests (node --test) against real stacks started by `python -m sidecar.testing`.
# Nothing generated is committed, so there is no gen/check target.
TS_DIR := clients/typescript
TS_NPM_CACHE := $(CURDIR)/.tools/npm-cache

CLIENT_TEST += test-typescript

.PHONY: test-typescript build-typescript

# npm ci again only when the manifest or the lock file changed (by content, so a checkout
# that only touches them does not reinstall); npm ci empties node_modules, old stamps too.
TS_DEPS_SUM := $(shell cat $(TS_DIR)/package.json $(TS_DIR)/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
TS_DEPS := $(TS_DIR)/node_modules/.installed-$(TS_DEPS_SUM)

$(TS_DEPS):
	cd $(TS_DIR) && npm ci --cache $(TS_NPM_CACHE) --prefer-offline --no-audit --no-fund --loglevel=error
	touch $@

## build-typescript: generate the TypeScript client's code from protos/ and compile it.
build-typescript: $(TS_DEPS)
	cd $(TS_DIR) && npm run --silent build

## test-typescript: build the TypeScript client and test it against a real sidecar.
test-typescript: install build-typescript
	cd $(TS_DIR) && AGENT_SIDECAR_PYTHON=$(CURDIR)/$(PY) npm test --silent
