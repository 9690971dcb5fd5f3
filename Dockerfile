# syntax=docker/dockerfile:1
# Two images from one file, each built in a throw-away stage and copied into a clean one:
#   docker build --target operator -t REGISTRY/tpujob/operator:0.1.0 .
#   docker build --target trainer  -t REGISTRY/tpujob/trainer:0.1.0 .
# Base images are build arguments; pin them by digest for reproducible builds, e.g.
#   --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:<digest>
# Every Python package is pinned in docker/constraints-*.txt (applied as PIP_CONSTRAINT).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG TRAINER_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------------------
# The operator: kopf, the Kubernetes client and the Compute Engine client, no JAX.
FROM ${PYTHON_IMAGE} AS operator-build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/src/docker/constraints-operator.txt
WORKDIR /src
COPY docker/constraints-operator.txt docker/
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY trainer/ trainer/
# A virtual environment holds the whole install, so the final stage copies one directory; pip
# itself stays behind.
RUN python -m venv /opt/tpujob \
    && /opt/tpujob/bin/pip install --no-cache-dir ".[operator]" \
    && /opt/tpujob/bin/pip uninstall --yes pip setuptools

FROM ${PYTHON_IMAGE} AS operator
# A named user for uid 65532: kopf names itself after the user, and Python cannot name a uid
# that /etc/passwd does not list. No pip, no compilers: the runtime needs neither.
RUN useradd --system --uid 65532 --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin tpujob \
    && python -m pip uninstall --yes pip setuptools wheel
COPY --from=operator-build /opt/tpujob /opt/tpujob
ENV PATH=/opt/tpujob/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# 8080: /healthz, /readyz, /metrics; 9443: the admission webhook (when enabled).
EXPOSE 8080 9443
ENTRYPOINT ["tpujob"]
CMD ["operator"]

# ---------------------------------------------------------------------------------------------
# The trainer: JAX for TPU (jax[tpu] brings jaxlib and libtpu), the tpujob trainer and W&B.
FROM ${TRAINER_IMAGE} AS trainer-build
ARG JAX_VERSION=0.10.2
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/src/docker/constraints-trainer.txt
WORKDIR /src
COPY docker/constraints-trainer.txt docker/
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY trainer/ trainer/
RUN python -m venv /opt/tpujob \
    && /opt/tpujob/bin/pip install --no-cache-dir "jax[tpu]==${JAX_VERSION}" ".[trainer,wandb]" \
    && /opt/tpujob/bin/pip uninstall --yes pip setuptools

FROM ${TRAINER_IMAGE} AS trainer
# The trainer runs as an unprivileged user. On GKE the TPU device plugin hands each container
# its TPU devices (/dev/vfio/* or /dev/accel*); where a node image keeps those root-only, build
# with --build-arg TRAINER_USER=root (or run the pods privileged) so that libtpu can open them.
ARG TRAINER_USER=tpujob
RUN useradd --uid 1000 --user-group --create-home --home-dir /home/tpujob \
        --shell /usr/sbin/nologin tpujob \
    && python -m pip uninstall --yes pip setuptools wheel
COPY --from=trainer-build /opt/tpujob /opt/tpujob
ENV PATH=/opt/tpujob/bin:$PATH \
    PYTHONUNBUFFERED=1
WORKDIR /home/tpujob
USER ${TRAINER_USER}
# The operator sets the command (tpujob-train with the job's config, or the job's own command).
CMD ["tpujob-train", "--help"]
