# The contract's compatibility and the tools that prove it from outside.
#
# check-breaking    fails when protos/ breaks the contract as released: buf breaking against
#                   protos/released/v1.binpb, under protos/buf.yaml's rules (FILE). `make lint`
#                   runs it.
# release-contract  writes protos/released/v1.binpb from protos/: run it when a release
#                   ships, and commit the image (docs/clients.md, "Compatibility").
RELEASED_CONTRACT := protos/released/v1.binpb

.PHONY: check-breaking release-contract

## check-breaking: fail when protos/ breaks the released contract (protos/released/v1.binpb).
check-breaking: $(BUF)
	$(BUF) breaking protos --against $(RELEASED_CONTRACT)

## release-contract: record protos/ as the released contract; commit the image.
release-contract: $(BUF)
	mkdir -p $(dir $(RELEASED_CONTRACT))
	$(BUF) build protos --exclude-source-info -o $(RELEASED_CONTRACT)

# Prerequisites only; the recipe is the Makefile's.
lint: check-breaking
