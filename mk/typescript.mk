# The TypeScript client (clients/typescript): npm ci into its node_modules (cache under
# .tools/), generate its code into src/gen with the TypeScript plugin of protos/buf.gen.yaml
# (ts-proto from those node_modules), compile with tsc, then run its tests (node --test)
# against real stacks started by `python -m sidecar.testing`. Nothing generated is
# committed, so there is no check target: a build that does not compile fails.
TS_DIR := clients/typescript
TS_NPM_CACHE := $(CURDIR)/.tools/npm-cache

TS_GEN := $(TS_DIR)/src/gen
# google/rpc's status and error details, which the client decodes from error trailers.
TS_GOOGLE := $(TS_DIR)/node_modules/google-proto-files

CLIENT_GEN += gen-typescript
CLIENT_TEST += test-typescript

.PHONY: test-typescript build-typescript gen-typescript

# npm ci again only when the manifest or the lock file changed (by content, so a checkout
# that only touches them does not reinstall); npm ci empties node_modules, old stamps too.
TS_DEPS_SUM := $(shell cat $(TS_DIR)/package.json $(TS_DIR)/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
TS_DEPS := $(TS_DIR)/node_modules/.installed-$(TS_DEPS_SUM)

$(TS_DEPS):
	cd $(TS_DIR) && npm ci --cache $(TS_NPM_CACHE) --prefer-offline --no-audit --no-fund --loglevel=error
	touch $@

# Generating needs only the plugin, so the package's own `npm ci && npm run build` (whose
# generate step is `make gen-typescript`) installs once; the targets that build and test
# here install again when the manifest or the lock file changed.
TS_PLUGIN := $(TS_DIR)/node_modules/.bin/protoc-gen-ts_proto

$(TS_PLUGIN):
	$(MAKE) --no-print-directory $(TS_DEPS)

## gen-typescript: generate the TypeScript client's code (src/gen) from protos/ and from
## google/rpc's status and error details.
gen-typescript: install $(BUF) $(TS_PLUGIN)
	rm -rf $(TS_GEN)
	$(call buf_generate,$(TS_GEN))
	$(call buf_generate,$(TS_GEN)) $(TS_GOOGLE) \
		--path $(TS_GOOGLE)/google/rpc/status.proto --path $(TS_GOOGLE)/google/rpc/error_details.proto

## build-typescript: generate the TypeScript client's code from protos/ and compile it.
build-typescript: $(TS_DEPS) gen-typescript
	cd $(TS_DIR) && npm run --silent compile

## test-typescript: build the TypeScript client and test it against a real sidecar.
test-typescript: install build-typescript
	cd $(TS_DIR) && AGENT_SIDECAR_PYTHON=$(CURDIR)/$(PY) npm test --silent
