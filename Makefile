# torchdev: run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The image's Python (ansible-core 2.18, ansible-runner 2.4): make test-image, the real ansible-operator.
IMAGE_VENV ?= .venv-image
IMAGE_STAMP := $(IMAGE_VENV)/.setup-stamp
STAMP := $(VENV)/.setup-stamp
# checkov cannot share .venv (its pins conflict with ours): its own virtualenv and lock file.
CHECKOV_VENV ?= .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.setup-stamp
# boto3 and moto's server cannot share .venv either (python-dateutil): the S3 checkpoint test's
# own virtualenv, which sees .venv's packages (torch) after its own through a .pth file.
S3_VENV ?= .venv-s3
S3_STAMP := $(S3_VENV)/.setup-stamp
# One version everywhere (docs/delivery.md): the VERSION file; `make release-check` verifies
# the copies that cannot read it (galaxy.yml, config/default's image tag) and bundle/.
VERSION ?= $(shell cat VERSION)
IMAGE_TAG_BASE ?= ghcr.io/torchdev/torchdev-operator
IMG ?= $(IMAGE_TAG_BASE):$(VERSION)
# The DevServer image (images/devserver): the CRD's default spec.image, same VERSION.
DEVSERVER_IMG ?= ghcr.io/torchdev/torchdev-devserver:$(VERSION)
# The OLM bundle (make bundle, docs/delivery.md): its image, channels, upgrade edges.
BUNDLE_IMG ?= $(IMAGE_TAG_BASE)-bundle:v$(VERSION)
CHANNELS ?= alpha
DEFAULT_CHANNEL ?= alpha
REPLACES ?=
SKIP_RANGE ?=
KUSTOMIZE := $(BIN)/kubectl kustomize
KUBECTL := $(BIN)/kubectl
METRICS_PORT ?= 8686
RUNTIME_METRICS_PORT ?= 8080
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# pytest workers of make test (pytest-xdist, a test file per worker at a time): most of an
# end-to-end test's time is waiting for the operator and for deadlines, so more workers than
# cores shorten the run; 1 runs the files one after another.
TEST_WORKERS ?= 4

.PHONY: help setup deps demo playground playground-down playground-status test soak cluster-build cluster cluster-down molecule lint checkov run install uninstall deploy undeploy bench docker-build docker-build-devserver clean \
	release-check bundle bundle-validate bundle-build test-image

help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n\nTargets:\n"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-24s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

$(STAMP): requirements.txt requirements-dev.txt constraints.txt requirements.yml pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BIN)/python hack/install_collections.py
	@touch $(STAMP)

setup: $(STAMP) ## Install everything into .venv/ (idempotent; quick when done)

# CLUSTER=real: the real control plane and ansible-operator of the test tier (built first).
demo: setup $(if $(filter real,$(CLUSTER)),cluster-build operator-build $(IMAGE_STAMP)) ## The demo on kubesim: CRDs, operator, a DevServer to Ready (a real $KUBECONFIG: asks first; DEMO_ARGS=--yes|--keep; CLUSTER=real: on the real control plane and ansible-operator)
	$(BIN)/python -m hack.demo $(if $(CLUSTER),--cluster $(CLUSTER)) $(DEMO_ARGS)

# The playground (hack/playground.py): kubesim, the operator (watches.yaml) and the exporter left running in the
# background, the DevUser demo onboarded; state, kubeconfig, devctl config and logs in .cache/playground. kubesim
# only: CLUSTER=real is refused with what to run instead (make cluster, make run).
playground: setup ## Keep kubesim, the operator and the exporter running in the background with a demo user; prints the export KUBECONFIG= line and what to try (again: says it runs)
	@$(BIN)/python -m hack.playground up $(if $(CLUSTER),--cluster $(CLUSTER))

playground-down: ## Stop exactly what make playground started (pids checked against their command lines); again: a no-op
	@$(BIN)/python -m hack.playground down

playground-status: ## What the playground runs, its kubeconfig and export line (as JSON: .venv/bin/python -m hack.playground status -o json)
	@$(BIN)/python -m hack.playground status

deps: ## The Debian packages some tests run (openssh-server, prometheus): installed as root with apt, else one line naming the command
	@bash hack/deps.sh

# After pytest, the real tier's e2e modules (make test-real, its output in .cache/test-real.log,
# printed at the end) run beside molecule, lint and checkov; each result counts.  pytest runs only
# the kubesim_only tests of REAL_E2E's modules (--on-real-tier): each of their other tests runs
# once, on the real tier (plain pytest, make test-real-kubesim: all of them on kubesim).
test: deps setup $(S3_STAMP) cluster-build ## Run every test: pytest (unit, kubesim, CLI, e2e, the real control plane's tests/real, small reliability runs; TEST_WORKERS files at a time), then the e2e modules of REAL_E2E on the real tier beside molecule, lint and checkov
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not soak" --durations=25 --on-real-tier "$(REAL_E2E)"
	@mkdir -p .cache; rm -f .cache/test-real.rc; \
	  ( $(MAKE) --no-print-directory test-real > .cache/test-real.log 2>&1; echo $$? > .cache/test-real.rc ) & \
	  $(MAKE) --no-print-directory molecule && $(MAKE) --no-print-directory lint && $(MAKE) --no-print-directory checkov; \
	  rc=$$?; wait; echo "--- make test-real (.cache/test-real.log)"; cat .cache/test-real.log; \
	  test $$rc -eq 0 && test "$$(cat .cache/test-real.rc)" = 0

# The real control plane of tests/real (issue 26): kube-apiserver, kube-controller-manager and
# kube-scheduler from k8s.io/kubernetes, an embedded etcd (hack/cluster/go.mod pins them) and kwok,
# the fake kubelet, built into .cache/cluster/bin; the stamps make a second build a no-op.
CLUSTER_BIN := .cache/cluster/bin
CLUSTER_STAMP = $(CLUSTER_BIN)/.build-stamp-$(K8S_VERSION)
KWOK_VERSION ?= v0.8.0
KWOK_STAMP := $(CLUSTER_BIN)/.kwok-$(KWOK_VERSION)
CLUSTER_DIR ?= .cache/cluster/run
CLUSTER_GO_SOURCES := hack/cluster/go.mod hack/cluster/go.sum $(wildcard hack/cluster/*.go hack/cluster/cmd/*/*.go)

# The release's version in the binaries, as Kubernetes' own build stamps it (hack/lib/version.sh):
# unstamped, kube-apiserver's /version says v0.0.0-master+$Format:%H$, which Kueue cannot parse
# (the stamp's name carries the version: binaries built unstamped are rebuilt).
K8S_VERSION := $(shell sed -n 's/^\tk8s.io\/kubernetes \(v[0-9.]*\)$$/\1/p' hack/cluster/go.mod)
K8S_VERSION_PARTS := $(subst ., ,$(K8S_VERSION:v%=%))
K8S_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(K8S_VERSION_PARTS)) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(K8S_VERSION_PARTS)) \
	-X k8s.io/component-base/version.gitTreeState=clean

$(CLUSTER_STAMP): $(CLUSTER_GO_SOURCES)
	@mkdir -p $(CLUSTER_BIN)
	cd hack/cluster && CGO_ENABLED=0 nice go build -ldflags "$(K8S_LDFLAGS)" -o $(CURDIR)/$(CLUSTER_BIN)/ ./cmd/etcd \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler
	@touch $@

# kwok's own stages from its module (what kwokctl gives kwok): nodes Ready with their leases
# renewed, pods Running/Ready on them, deleted pods removed; not pod-complete (a Job's pod would
# succeed at once, where kubesim's run until kubesim.io/succeed-after).
KWOK_STAGES := node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease pod/fast/pod-ready pod/fast/pod-delete

$(KWOK_STAMP):
	@mkdir -p $(CLUSTER_BIN)
	CGO_ENABLED=0 GOBIN=$(CURDIR)/$(CLUSTER_BIN) nice go install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)
	dir=$$(go mod download -json sigs.k8s.io/kwok@$(KWOK_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && \
		for s in $(KWOK_STAGES); do echo ---; cat "$$dir/kustomize/stage/$$s.yaml"; done > $(CLUSTER_BIN)/kwok-stages.yaml
	@touch $@

cluster-build: $(CLUSTER_STAMP) $(KWOK_STAMP) ## Build the real control plane (etcd, kube-apiserver, -controller-manager, -scheduler, kwok) into .cache/cluster/bin

cluster: setup cluster-build ## Start the real control plane on loopback (CLUSTER_DIR); prints the export KUBECONFIG= line
	@$(BIN)/python -m hack.cluster up --dir $(CLUSTER_DIR)

cluster-down: ## Stop the control plane `make cluster` started (idempotent)
	@$(BIN)/python -m hack.cluster down --dir $(CLUSTER_DIR)

# The real ansible-operator and Kueue of tests/real (issue 26.3, 26.2), into .cache/cluster/bin:
# ansible-operator-plugins v1.39.0 (the base image's release) through hack/ansible_operator/go.mod
# (`go install ...@v1.39.0` is refused: hack/ansible_operator/README.md), Kueue by `go install`
# (KUEUE_VERSION is hack/kueue/run.py's VERSION; third_party/kueue-<version> holds its CRDs).
OPERATOR_STAMP := .cache/cluster/bin/.ansible-operator-stamp
KUEUE_VERSION := v0.19.2
KUEUE_STAMP := .cache/cluster/bin/.kueue-$(KUEUE_VERSION)
.PHONY: operator-build kueue-build

$(OPERATOR_STAMP): hack/ansible_operator/go.mod hack/ansible_operator/go.sum
	@mkdir -p $(dir $@)
	cd hack/ansible_operator && CGO_ENABLED=0 nice go build -trimpath -o $(CURDIR)/.cache/cluster/bin/ansible-operator \
		github.com/operator-framework/ansible-operator-plugins/cmd/ansible-operator
	@touch $@

$(KUEUE_STAMP):
	@mkdir -p $(dir $@)
	CGO_ENABLED=0 GOBIN=$(CURDIR)/.cache/cluster/bin nice go install sigs.k8s.io/kueue/cmd/kueue@$(KUEUE_VERSION)
	@touch $@

operator-build: $(OPERATOR_STAMP) ## Build the real ansible-operator (v1.39.0, hack/ansible_operator) into .cache/cluster/bin

kueue-build: $(KUEUE_STAMP) ## Build the real Kueue controller (v0.19.2) into .cache/cluster/bin

test: operator-build kueue-build

# The full-size runs of tests/reliability (issue 17): 50 DevServers, 10 DevUsers, 10 TrainingJobs and 10
# EphemeralAccelerationJobs under 20 % API faults, 20 SIGKILLs of the operator during a burst; one file
# after another (their figures are timings); the figures are printed at the end (SOAK_FIGURES).
SOAK_FIGURES ?= .cache/reliability-figures.jsonl

soak: setup ## The full-size reliability runs (tests/reliability, marker soak), their figures at the end
	@mkdir -p $(dir $(SOAK_FIGURES)) && rm -f $(SOAK_FIGURES)
	RELIABILITY_FIGURES=$(CURDIR)/$(SOAK_FIGURES) $(BIN)/python -m pytest -q -m soak tests/reliability
	@cat $(SOAK_FIGURES)

molecule: setup ## The molecule scenario (kubesim started in create.yml): converge, idempotence, verify
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/molecule test

lint: setup ## ruff (pyflakes rules), yamllint, ansible-lint (production profile) and hadolint (Dockerfile)
	$(BIN)/ruff check --no-cache -q .
	$(BIN)/yamllint -s .
	$(BIN)/hadolint Dockerfile images/devserver/Dockerfile
	$(BIN)/ansible-lint --profile production --offline -q roles playbooks molecule

$(S3_STAMP): requirements-s3.txt $(STAMP)
	@test -x $(S3_VENV)/bin/python || $(PYTHON) -m venv $(S3_VENV)
	$(S3_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-s3.txt
	$(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > \
	  "$$($(S3_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/torchdev-venv.pth"
	@touch $(S3_STAMP)

# `make test-image`: the operator image without Docker (hack/image.py): the base image's Python
# (3.12) and packages (requirements-image.txt) in their own virtualenv, HOME laid out by the
# Dockerfile's own instructions.
IMAGE_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3.12)
IMAGE_HOME := .cache/image-home
# Every role's end-to-end tests (DevServer with and without Kueue, lifecycle, usage records,
# TrainingJob, DevUser, EphemeralAccelerationJob) with the roles run by the image's ansible-core, and
# the template-injection table (issue 25.1: user text is never template input under 2.18 either).
IMAGE_TESTS ?= tests/e2e tests/devuser/test_devuser_e2e.py tests/devuser/test_devuser_kueue_e2e.py \
	tests/security/test_template_injection.py

$(IMAGE_STAMP): requirements-image.txt requirements-image-test.txt
	rm -rf $(IMAGE_VENV)
	$(IMAGE_PYTHON) -m venv $(IMAGE_VENV)
	$(IMAGE_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-image.txt
	$(IMAGE_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-image-test.txt \
	  -c requirements-image.txt
	@touch $(IMAGE_STAMP)

# tests/real runs the real ansible-operator with the image's Python environment (hack/ansible_operator/run.py).
test: $(IMAGE_STAMP)

# The end-to-end modules on the real tier (issue 26.4; tests/_real_tier.py): the same tests as on
# kubesim, against the real control plane, Kueue and ansible-operator (its own ServiceAccount and
# config/rbac). One file at a time: v1.39.0's proxy port is fixed, so one operator runs at a time in a
# network namespace (python -m hack.isolate DIR -- make test-real runs one beside another).
BURST ?= 50
REAL_E2E ?= tests/e2e/test_devserver_e2e.py tests/e2e/test_distributed_e2e.py tests/e2e/test_onboarding_e2e.py \
	tests/e2e/test_usage_e2e.py tests/e2e/test_eaj_e2e.py tests/devuser/test_devuser_e2e.py \
	tests/e2e/test_pod_refused_e2e.py tests/e2e/test_home_resize_e2e.py tests/e2e/test_job_pod_refused_e2e.py
# Pass on the real tier too, left out of make test to keep it inside CI's 90 minutes (real-time
# waits: lifecycle + TrainingJob 15 passed in 939 s; the Kueue modules 13 tests in about 22 minutes, lifecycle with
# Kueue and the seed examples 4 in about 10 minutes, TrainingJob with Kueue (preemption included) 4 in about 4 minutes,
# a queued server's new shape 2 in 229 s, a DevServer preempted by Kueue with and without a tight
# namespace quota 2 in 635 s on a loaded 2-core machine):
# make test-real-all runs them as well.
REAL_E2E_SLOW ?= tests/e2e/test_lifecycle_e2e.py tests/e2e/test_trainingjob_e2e.py \
	tests/e2e/test_kueue_e2e.py tests/e2e/test_eaj_kueue_e2e.py tests/devuser/test_devuser_kueue_e2e.py \
	tests/e2e/test_lifecycle_kueue_e2e.py tests/e2e/test_trainingjob_kueue_e2e.py tests/e2e/test_kueue_reshape_e2e.py \
	tests/e2e/test_devserver_preemption_e2e.py tests/e2e/test_devserver_preemption_quota_e2e.py \
	tests/e2e/test_seed_examples_e2e.py tests/e2e/test_ssh_service_type_e2e.py
.PHONY: test-real
test-real: setup cluster-build operator-build kueue-build $(IMAGE_STAMP) ## The e2e modules of REAL_E2E on the real control plane, Kueue and ansible-operator (TORCHDEV_E2E_TIER=real)
	TORCHDEV_E2E_TIER=real $(BIN)/python -m pytest -q -p no:xdist -m "not soak and not kubesim_only" $(REAL_E2E)

.PHONY: test-real-kubesim
test-real-kubesim: setup ## The e2e modules of REAL_E2E on kubesim and the local runtime (what make test runs on the real tier instead)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not soak" $(REAL_E2E)

.PHONY: test-real-all
test-real-all: ## make test-real with REAL_E2E_SLOW too (lifecycle, TrainingJob)
	$(MAKE) --no-print-directory test-real REAL_E2E="$(REAL_E2E) $(REAL_E2E_SLOW)"

$(CHECKOV_STAMP): requirements-checkov.txt
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	@touch $(CHECKOV_STAMP)

checkov: setup $(CHECKOV_STAMP) ## checkov on every rendered manifest (roles x sample CRs, config/); skips in .checkov.yaml
	@out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && \
	  $(BIN)/python -m hack.render_manifests --image $(IMG) "$$out" && \
	  BC_SKIP_MAPPING=TRUE $(CHECKOV_VENV)/bin/checkov --config-file .checkov.yaml -d "$$out"

run: setup ## Run the operator against $KUBECONFIG in the foreground: reconcile metrics on :8080, the exporter on 127.0.0.1:8686 (METRICS_PORT; plain HTTP, --insecure-loopback)
	@$(BIN)/torchdev-exporter --insecure-loopback --address 127.0.0.1 --port $(METRICS_PORT) & exporter=$$!; trap 'kill $$exporter' EXIT; \
	if command -v ansible-operator >/dev/null 2>&1; then \
	  ansible-operator run --watches-file=./watches.yaml --metrics-bind-address=:$(RUNTIME_METRICS_PORT); \
	else \
	  $(BIN)/torchdev-runtime --watches-file watches.yaml --metrics-bind-address :$(RUNTIME_METRICS_PORT); \
	fi

install: setup ## Install the CRDs into the cluster in $KUBECONFIG
	$(KUSTOMIZE) config/crd | $(KUBECTL) apply --server-side -f -

uninstall: setup ## Remove the CRDs from the cluster in $KUBECONFIG
	$(KUSTOMIZE) config/crd | $(KUBECTL) delete --ignore-not-found -f -

deploy: setup ## Deploy the operator (CRDs, RBAC, manager) with image $IMG, and the users' admission policies
	$(KUSTOMIZE) config/default | sed "s#image: $$($(BIN)/python -m hack.version image)\$$#image: $(IMG)#" | \
	  $(KUBECTL) apply --server-side -f -
	$(KUSTOMIZE) config/admission | $(KUBECTL) apply --server-side -f -

undeploy: setup ## Remove the operator deployment (keeps user volumes)
	$(KUSTOMIZE) config/admission | $(KUBECTL) delete --ignore-not-found -f -
	$(KUSTOMIZE) config/default | $(KUBECTL) delete --ignore-not-found -f -

bench: setup ## Run the benchmarks in bench/ and print their figures
	$(BIN)/python -m bench.kubesim_bench
	$(BIN)/python -m bench.reconcile
	$(BIN)/python -m bench.exporter
	$(BIN)/python -m bench.lifecycle
	$(BIN)/python -m bench.queue_eta
	$(BIN)/python -m bench.devctl_start --no-check

bench-real: setup cluster-build operator-build $(IMAGE_STAMP) ## The DevServer burst on the real ansible-operator and control plane against its floor, then the local runtime's (bench/reconcile.py --real)
	PYTHONPATH=tests $(BIN)/python -m bench.reconcile --real --burst $(BURST)

bundle: setup ## Write the OLM bundle (bundle/, bundle.Dockerfile) for VERSION and IMG from config/manifests
	$(BIN)/python -m hack.bundle --version "$(VERSION)" --image "$(IMG)" --channels "$(CHANNELS)" \
	  --default-channel "$(DEFAULT_CHANNEL)" $(if $(REPLACES),--replaces "$(REPLACES)") \
	  $(if $(SKIP_RANGE),--skip-range "$(SKIP_RANGE)")

bundle-validate: bundle ## Validate bundle/ offline (hack/bundle_validate.py: what operator-sdk bundle validate checks)
	$(BIN)/python -m hack.bundle_validate --version "$(VERSION)"

bundle-build: ## Build the bundle image $BUNDLE_IMG (needs a Docker engine and make bundle)
	docker build -f bundle.Dockerfile -t $(BUNDLE_IMG) .

release-check: ## Every place says VERSION (VERSION file, galaxy.yml, pyproject, devctl, IMG, config/default, the default DevServer image, bundle/)
	$(BIN)/python -m hack.version check --version "$(VERSION)" --img "$(IMG)" --devserver-img "$(DEVSERVER_IMG)" \
	  --bundle bundle

test-image: setup $(IMAGE_STAMP) ## The image without Docker: HOME from the Dockerfile, every role's e2e tests and molecule with its ansible-core 2.18
	$(BIN)/python -m hack.image --venv $(IMAGE_VENV) --home $(IMAGE_HOME) --env-file $(IMAGE_HOME).env
	set -a && . ./$(IMAGE_HOME).env && set +a && \
	  TORCHDEV_ANSIBLE_PYTHON="$(CURDIR)/$(IMAGE_VENV)/bin/python" \
	  ANSIBLE_COLLECTIONS_PATH="$(CURDIR)/$(IMAGE_HOME)/.ansible/collections" \
	  $(BIN)/python -m pytest -q -p no:cacheprovider $(IMAGE_TESTS)
	@# molecule's prerun would install this checkout into ~/.ansible/collections, ahead of the image's
	printf 'prerun: false\n' > $(IMAGE_HOME).molecule.yml
	set -a && . ./$(IMAGE_HOME).env && set +a && \
	  ANSIBLE_COLLECTIONS_PATH="$(CURDIR)/$(IMAGE_HOME)/.ansible/collections" \
	  PATH="$(CURDIR)/$(IMAGE_VENV)/bin:$$PATH" $(IMAGE_VENV)/bin/molecule -c $(IMAGE_HOME).molecule.yml test

docker-build: ## Build the operator image (needs a Docker engine)
	docker build -t $(IMG) .

docker-build-devserver: ## Build the DevServer image $DEVSERVER_IMG, the default spec.image (needs a Docker engine)
	docker build -t $(DEVSERVER_IMG) images/devserver

clean: ## Remove bundle/, .venv, collections and the test-only tools (.venv-checkov, .venv-s3, .venv-image, .cache)
	rm -rf bundle bundle.Dockerfile $(VENV) collections $(CHECKOV_VENV) $(S3_VENV) $(IMAGE_VENV) .cache
