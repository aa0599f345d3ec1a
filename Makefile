# dl2: two commands do all set-up on a fresh machine.
#   make demo   create .venv if missing, install from the pins, build the local Kubernetes control plane if missing,
#               run the lifecycle end to end (pipelines.lifecycle)
#   make test   same bootstrap, then lint (ruff, import-linter layers, hadolint), types (mypy on dl2/, testbed/, pipelines/, dags/) and the test suite
#   make kube-assets   build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd and kwok from the
#               Go module proxy (tools/kube) into ~/.cache/dl2/kube-assets/<digest of the pins>, unless already there
#   make helm   build helm (tools/helm), which lints and renders k8s/chart/, into ~/.cache/dl2/helm/<digest>, the same way
#   make versitygw   build versitygw (tools/versitygw), an S3 server over a folder: the object storage the tests keep
#               decision records in, into ~/.cache/dl2/versitygw/<digest>
#   make prometheus   build prometheus (tools/prometheus), which scrapes a job's own metrics in the tests of progress
#               from metrics, into ~/.cache/dl2/prometheus/<digest>
#   make real-nodes   what real nodes (testbed.controlplane.nodes) need: Debian's containerd, runc and CNI plugins through
#               apt-get if missing (the one step that installs system packages; root), the kubelet of the control
#               plane's release (tools/kubelet) into ~/.cache/dl2/kubelet/<digest>, and the static pause and hello
#               programs of the nodes' images (tools/pause) into ~/.cache/dl2/pause/<digest>
#   make training-operator   Kubeflow's training operator (tools/training-operator), which runs PyTorchJobs' pods on
#               real nodes, and its release's ClusterRole, into ~/.cache/dl2/training-operator/<digest>
#   make image   the dl2 image from the Dockerfile without a registry (testbed.controlplane.image): Debian's podman, buildah
#               and debootstrap through apt-get if missing (root), a Debian bookworm base by debootstrap kept as an OCI
#               archive in ~/.cache/dl2/image/<digest>, then `podman build` into localhost/dl2:<version>, checked by
#               running it; IMAGE_ARGS=--export also writes the OCI archive `ctr images import` takes
SHELL := /bin/bash
VENV := .venv
PYTHON := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
WHEELS ?= $(or $(PIP_FIND_LINKS),/opt/wheels)
# torch's CPU build where the wheel folder has it; otherwise requirements.txt's torch==2.13.0 comes from PyPI
TORCH_WHEEL := $(firstword $(wildcard $(WHEELS)/torch-2.13.0+cpu-*.whl))
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 2

.PHONY: demo test lint typecheck unit bench clean kube-assets helm versitygw prometheus real-nodes training-operator image

$(INSTALLED): requirements/requirements.txt requirements/dev.txt requirements/constraints.txt pyproject.toml
	@test -x $(PYTHON) || python3.11 -m venv $(VENV)
	@$(PYTHON) -m pip install -q --disable-pip-version-check pip==26.3 uv==0.13.9 2>&1 | grep -v "is ignored" || true
	@# uv ignores pip.conf, so the CPU wheel is named by its path; compile .pyc once
	@# (PYTHONDONTWRITEBYTECODE=1 on these machines would otherwise make every import slow forever)
	$(VENV)/bin/uv pip install --python $(PYTHON) --compile-bytecode -q $(TORCH_WHEEL) \
		-r requirements/requirements.txt -r requirements/dev.txt -c requirements/constraints.txt
	$(VENV)/bin/uv pip install --python $(PYTHON) --no-deps --compile-bytecode -q -e .
	@touch $@

demo: $(INSTALLED) kube-assets
	$(PYTHON) -m pipelines.lifecycle

test: $(INSTALLED) kube-assets helm versitygw prometheus real-nodes training-operator lint typecheck unit

kube-assets: $(INSTALLED)
	@$(PYTHON) -m testbed.controlplane.assets > /dev/null

helm: $(INSTALLED)
	@$(PYTHON) -m testbed.controlplane.assets --tool helm > /dev/null

versitygw: $(INSTALLED)
	@$(PYTHON) -m testbed.controlplane.assets --tool versitygw > /dev/null

prometheus: $(INSTALLED)
	@$(PYTHON) -m testbed.controlplane.assets --tool prometheus > /dev/null

REAL_NODE_PACKAGES := containerd runc containernetworking-plugins
real-nodes: $(INSTALLED)
	@dpkg-query -W -f='$${Status}\n' $(REAL_NODE_PACKAGES) 2>/dev/null | grep -c '^install ok installed$$' \
		| grep -qx $(words $(REAL_NODE_PACKAGES)) || { apt-get update -q && apt-get install -y -q --no-install-recommends $(REAL_NODE_PACKAGES); }
	@nice $(PYTHON) -m testbed.controlplane.assets --tool kubelet > /dev/null
	@nice $(PYTHON) -m testbed.controlplane.assets --tool pause > /dev/null

training-operator: $(INSTALLED)
	@nice $(PYTHON) -m testbed.controlplane.assets --tool training-operator > /dev/null

IMAGE_PACKAGES := podman buildah debootstrap runc
IMAGE_ARGS ?=
image: $(INSTALLED)
	@dpkg-query -W -f='$${Status}\n' $(IMAGE_PACKAGES) 2>/dev/null | grep -c '^install ok installed$$' \
		| grep -qx $(words $(IMAGE_PACKAGES)) || { apt-get update -q && apt-get install -y -q --no-install-recommends $(IMAGE_PACKAGES); }
	nice $(PYTHON) -m testbed.controlplane.image $(IMAGE_ARGS)

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/hadolint Dockerfile

typecheck: $(INSTALLED)
	$(VENV)/bin/mypy

unit: $(INSTALLED) kube-assets helm versitygw prometheus real-nodes training-operator
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

bench: $(INSTALLED)
	$(PYTHON) benchmarks/bench_compat_speed.py
	$(PYTHON) benchmarks/bench_realistic_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache results
