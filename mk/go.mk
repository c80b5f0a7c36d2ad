# Go: the client module (clients/go) and the tool-server library (toolservers/go).
#
# gen-go    regenerates the committed stubs in clients/go/agentsidecarv1 with buf and the Go
#           plugins of protos/buf.gen.yaml: the pinned protoc-gen-go / protoc-gen-go-grpc,
#           installed into .tools/bin.
# check-go  generates into a scratch directory and fails when the committed stubs differ,
#           or when a Go file is not gofmt-formatted.
# test-go   vets both modules and runs their tests; the client's tests start the shared
#           launcher (python -m sidecar.testing) with the venv's python.
GO ?= go
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GO_BIN := .tools/bin
GO_PLUGIN_STAMPS := .tools/go/protoc-gen-go@$(PROTOC_GEN_GO_VERSION) \
	.tools/go/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
GO_GEN_DIR := clients/go/agentsidecarv1
GO_GEN_CHECK := .tools/go/gen-check
GO_MODULES := clients/go toolservers/go
# protos/buf.gen.yaml names the plugins by their path in .tools/bin.
GO_BUF = $(call buf_generate,clients/go)

CLIENT_GEN += gen-go
CLIENT_CHECK += check-go
CLIENT_TEST += test-go

.PHONY: gen-go check-go test-go test-go-client test-go-toolservers

.tools/go/protoc-gen-go@$(PROTOC_GEN_GO_VERSION):
	mkdir -p $(GO_BIN) .tools/go
	GOBIN="$(CURDIR)/$(GO_BIN)" $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	touch $@

.tools/go/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION):
	mkdir -p $(GO_BIN) .tools/go
	GOBIN="$(CURDIR)/$(GO_BIN)" $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	touch $@

## gen-go: regenerate the Go stubs in clients/go/agentsidecarv1 from protos/.
gen-go: install $(BUF) $(GO_PLUGIN_STAMPS)
	rm -f $(GO_GEN_DIR)/*.pb.go
	$(GO_BUF)

## check-go: fail when the committed Go stubs differ from protos/ or Go code is unformatted.
check-go: install $(BUF) $(GO_PLUGIN_STAMPS)
	rm -rf $(GO_GEN_CHECK) && mkdir -p $(GO_GEN_CHECK)
	$(GO_BUF) --output $(GO_GEN_CHECK)
	diff -r $(GO_GEN_CHECK)/$(GO_GEN_DIR) $(GO_GEN_DIR) \
		|| (echo "Go stubs are stale: run 'make gen-go' and commit" && exit 1)
	rm -rf $(GO_GEN_CHECK)
	@unformatted="$$(gofmt -l $(GO_MODULES))"; \
	if [ -n "$$unformatted" ]; then echo "not gofmt-formatted: $$unformatted"; exit 1; fi

## test-go: vet and test the Go client (against a real sidecar) and the tool-server library.
test-go: test-go-client test-go-toolservers

test-go-client: install
	cd clients/go && $(GO) vet ./... && \
		AGENT_SIDECAR_PYTHON="$(CURDIR)/$(PY)" $(GO) test -count=1 -timeout 5m ./...

test-go-toolservers:
	cd toolservers/go && $(GO) vet ./... && $(GO) test -count=1 -timeout 5m ./...
