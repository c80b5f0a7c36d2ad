# What the MCP tests run from npm (mk/mcp/package.json, pinned by its lock file): the
# reference server @modelcontextprotocol/server-everything, the MCP Inspector's CLI, the
# conformance suite, and the Node.js 22 the last two need (as an npm package: the machine's
# Node.js may be older). Installed into .tools/mcp, again only when the lock file changes;
# the npm cache under .tools/ makes a second install offline.
#
# mcp-tools   npm ci of mk/mcp into .tools/mcp (`make pytest` runs it first).
MCP_TOOLS_DIR := .tools/mcp
MCP_TOOLS_SUM := $(shell cat mk/mcp/package.json mk/mcp/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
MCP_TOOLS := $(MCP_TOOLS_DIR)/node_modules/.installed-$(MCP_TOOLS_SUM)

.PHONY: mcp-tools

## mcp-tools: the MCP servers, clients and conformance suite the tests run, into .tools/mcp.
mcp-tools: $(MCP_TOOLS)

$(MCP_TOOLS): mk/mcp/package.json mk/mcp/package-lock.json
	mkdir -p $(MCP_TOOLS_DIR)
	cp mk/mcp/package.json mk/mcp/package-lock.json $(MCP_TOOLS_DIR)/
	cd $(MCP_TOOLS_DIR) && npm ci --cache $(CURDIR)/.tools/npm-cache --prefer-offline \
		--no-audit --no-fund --loglevel=error
	touch $@

# Prerequisites only; the recipe is the Makefile's.
pytest: $(MCP_TOOLS)
