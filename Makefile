# torchdev: run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-stamp
# checkov cannot share .venv (its pins conflict with ours): its own virtualenv and lock file.
CHECKOV_VENV ?= .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.setup-stamp
# boto3 and moto's server cannot share .venv either (python-dateutil): the S3 checkpoint test's
# own virtualenv, which sees .venv's packages (torch) after its own through a .pth file.
S3_VENV ?= .venv-s3
S3_STAMP := $(S3_VENV)/.setup-stamp
IMG ?= ghcr.io/torchdev/torchdev-operator:0.1.0
KUSTOMIZE := $(BIN)/kubectl kustomize
KUBECTL := $(BIN)/kubectl
METRICS_PORT ?= 8686
RUNTIME_METRICS_PORT ?= 8080
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: help setup demo test molecule lint checkov run install uninstall deploy undeploy bench docker-build clean

help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n\nTargets:\n"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-14s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

$(STAMP): requirements.txt requirements-dev.txt constraints.txt requirements.yml pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BIN)/python hack/install_collections.py
	@touch $(STAMP)

setup: $(STAMP) ## Install everything into .venv/ (idempotent; quick when done)

demo: setup ## The demo on kubesim: CRDs, operator, a DevServer to Ready (a real $KUBECONFIG: asks first; DEMO_ARGS=--yes|--keep)
	$(BIN)/python hack/demo.py $(DEMO_ARGS)

test: setup $(S3_STAMP) ## Run every test: pytest (unit, kubesim, CLI, e2e), molecule, lint
	$(BIN)/python -m pytest -q
	$(MAKE) --no-print-directory molecule
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory checkov

molecule: setup ## The molecule scenario (kubesim started in create.yml): converge, idempotence, verify
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/molecule test

lint: setup ## ruff (pyflakes rules), yamllint and ansible-lint (production profile)
	$(BIN)/ruff check --no-cache -q .
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --profile production --offline -q roles playbooks molecule

$(S3_STAMP): requirements-s3.txt $(STAMP)
	@test -x $(S3_VENV)/bin/python || $(PYTHON) -m venv $(S3_VENV)
	$(S3_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-s3.txt
	$(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > \
	  "$$($(S3_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/torchdev-venv.pth"
	@touch $(S3_STAMP)

$(CHECKOV_STAMP): requirements-checkov.txt
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	@touch $(CHECKOV_STAMP)

checkov: setup $(CHECKOV_STAMP) ## checkov on every rendered manifest (roles x sample CRs, config/); skips in .checkov.yaml
	@out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && \
	  $(BIN)/python -m hack.render_manifests --image $(IMG) "$$out" && \
	  BC_SKIP_MAPPING=TRUE $(CHECKOV_VENV)/bin/checkov --config-file .checkov.yaml -d "$$out"

run: setup ## Run the operator against $KUBECONFIG in the foreground: reconcile metrics on :8080, the exporter on :8686 (METRICS_PORT)
	@$(BIN)/torchdev-exporter --port $(METRICS_PORT) & exporter=$$!; trap 'kill $$exporter' EXIT; \
	if command -v ansible-operator >/dev/null 2>&1; then \
	  ansible-operator run --watches-file=./watches.yaml --metrics-bind-address=:$(RUNTIME_METRICS_PORT); \
	else \
	  $(BIN)/torchdev-runtime --watches-file watches.yaml --metrics-bind-address :$(RUNTIME_METRICS_PORT); \
	fi

install: setup ## Install the CRDs into the cluster in $KUBECONFIG
	$(KUSTOMIZE) config/crd | $(KUBECTL) apply --server-side -f -

uninstall: setup ## Remove the CRDs from the cluster in $KUBECONFIG
	$(KUSTOMIZE) config/crd | $(KUBECTL) delete --ignore-not-found -f -

deploy: setup ## Deploy the operator (CRDs, RBAC, manager) with image $IMG
	$(KUSTOMIZE) config/default | sed "s#controller:latest#$(IMG)#" | $(KUBECTL) apply --server-side -f -

undeploy: setup ## Remove the operator deployment (keeps user volumes)
	$(KUSTOMIZE) config/default | $(KUBECTL) delete --ignore-not-found -f -

bench: setup ## Run the benchmarks in bench/ and print their figures
	$(BIN)/python -m bench.kubesim_bench
	$(BIN)/python -m bench.reconcile
	$(BIN)/python -m bench.exporter
	$(BIN)/python -m bench.lifecycle

docker-build: ## Build the operator image (needs a Docker engine)
	docker build -t $(IMG) .

clean: ## Remove .venv, collections and the test-only tools (.venv-checkov, .venv-s3)
	rm -rf $(VENV) collections $(CHECKOV_VENV) $(S3_VENV)
