# The contract's compatibility and the tools that prove it from outside.
#
# check-breaking    fails when protos/ breaks the contract as released: buf breaking against
#                   protos/released/v1.binpb, under protos/buf.yaml's rules (FILE). `make lint`
#                   runs it.
# release-contract  writes protos/released/v1.binpb from protos/: run it when a release
#                   ships, and commit the image (docs/clients.md, "Compatibility").
# grpcurl           installs the pinned grpcurl into .tools/bin (go install, once per version:
#                   about 3 minutes with empty Go caches, nothing warm). The Python suite runs it against a
#                   real sidecar and tool server (tests/api/test_grpcurl.py), so `make pytest`
#                   installs it first.
GO ?= go
GRPCURL_VERSION := v1.9.4
GRPCURL_STAMP := .tools/go/grpcurl@$(GRPCURL_VERSION)
RELEASED_CONTRACT := protos/released/v1.binpb

.PHONY: check-breaking release-contract grpcurl

## check-breaking: fail when protos/ breaks the released contract (protos/released/v1.binpb).
check-breaking: $(BUF)
	$(BUF) breaking protos --against $(RELEASED_CONTRACT)

## release-contract: record protos/ as the released contract; commit the image.
release-contract: $(BUF)
	mkdir -p $(dir $(RELEASED_CONTRACT))
	$(BUF) build protos --exclude-source-info -o $(RELEASED_CONTRACT)

## grpcurl: the pinned grpcurl, in .tools/bin.
grpcurl: $(GRPCURL_STAMP)

$(GRPCURL_STAMP):
	@echo "building grpcurl $(GRPCURL_VERSION) into .tools/bin (about 4 min, once)"
	mkdir -p .tools/bin .tools/go
	GOBIN="$(CURDIR)/.tools/bin" $(GO) install -ldflags '-X main.version=$(GRPCURL_VERSION)' \
		github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	touch $@

# Prerequisites only; the recipes are the Makefile's.
lint: check-breaking
pytest: $(GRPCURL_STAMP)
