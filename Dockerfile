# The image `dl2 serve` and `dl2 extender` run in (k8s/deployment.yaml, k8s/scheduler-extender.yaml):
#
#   docker build -t registry.example.com/dl2:0.1.0 .
#   docker push registry.example.com/dl2:0.1.0
#   (cd k8s && kustomize edit set image dl2=registry.example.com/dl2:0.1.0)
#
# Two stages: the first builds a virtual environment (the controller's extras, CPU torch, the lock's versions),
# the second copies it with the shipped models onto a slim Python, with no compiler or pip cache, as user 10001
# (the manifests' runAsUser; tests/unit/project/test_image.py checks that they agree).
#
# Build arguments (the defaults are a user's with a registry): PYTHON_IMAGE, the base of both stages; TORCH, the
# requirement or wheel path pip installs torch from; TORCH_INDEX, the index of torch and its dependencies. Without a
# registry, `make image` builds it with podman on a Debian bookworm made by debootstrap (k8s/README.md).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
ARG TORCH=torch==2.13.0+cpu
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
WORKDIR /src
RUN python -m venv /opt/dl2/venv
COPY requirements/constraints.txt requirements/constraints.txt
# torch's CPU build (PyPI's default pulls several GB of CUDA libraries), then the rest at the lock's versions
RUN /opt/dl2/venv/bin/pip install --index-url "${TORCH_INDEX}" "${TORCH}"
COPY pyproject.toml README.md ./
COPY dl2/ dl2/
COPY pipelines/ pipelines/
# compileall skips torch's test helpers written for a newer Python (py312_intrinsics.py: a SyntaxError on 3.11)
RUN grep -v -E '^(torch|nvidia-|cuda-|triton)' requirements/constraints.txt > /tmp/constraints.txt \
    && /opt/dl2/venv/bin/pip install -c /tmp/constraints.txt ".[kube,fast]" \
    && /opt/dl2/venv/bin/python -m compileall -q -x '/py3[1-9][2-9]_[a-z_]+[.]py$' /opt/dl2/venv

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="dl2" \
      org.opencontainers.image.description="A learned scheduler for deep-learning training clusters: dl2 serve, dl2 extender" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 dl2 \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/dl2 --no-create-home --shell /usr/sbin/nologin dl2
COPY --from=build /opt/dl2/venv /opt/dl2/venv
# the models the manifests name (the extender's placer; the controller loads its policy from the registry)
COPY models/harmony-placer-philly /opt/dl2/models/harmony-placer-philly
COPY models/harmony-speed-philly /opt/dl2/models/harmony-speed-philly
COPY models/dl2-philly /opt/dl2/models/dl2-philly
ENV PATH=/opt/dl2/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NUMBA_CACHE_DIR=/tmp/numba
USER 10001:10001
WORKDIR /var/lib/dl2
CMD ["dl2", "--help"]
