# syntax=docker/dockerfile:1
#
# lease-worker: a slim, non-root image. Build from the repository root:
#   scripts/image                      (docker or podman, whichever works here)
#   docker build -t lease-worker:0.1.0 .
# Reproducible: every package comes in at the exact version constraints.txt pins (the
# versions the tests ran with; scripts/lock writes it), the build backend included.
# Your application goes in /app (the working directory, on the import path): either add
#   COPY --chown=0:0 your_package/ /app/your_package/
# to the final stage, or install it as a package in the build stage (see below). Then run
#   lease-worker run your_package.module:app
# with its settings in LEASE_WORKER_* variables (deploy/k8s/base/configmap.yaml).
#
# The base image is pinned by version. Pin it by digest too where you build: resolve the
# digest with `docker buildx imagetools inspect python:3.11.15-slim-bookworm` and write it
# after the tag in both FROM lines, as python:3.11.15-slim-bookworm@sha256:<digest>
# (not resolvable where this file was written: no registry access).

FROM python:3.11.15-slim-bookworm AS build
# PIP_CONSTRAINT reaches pip's isolated build of the wheel too: setuptools is pinned there.
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/src/constraints.txt
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md LICENSE constraints.txt ./
COPY worker/ worker/
COPY backends/ backends/
# Your own package joins the same environment: copy it here and name it in the install
# line (COPY your_package/ your_package/, then `pip install . ./your_package`); pin its
# dependencies in constraints.txt too, or the build takes whatever is newest that day.
# Every dependency ships wheels for CPython 3.11 on Linux: no compiler is needed here either.
# pip and setuptools leave the environment once it is built: nothing installs at run time.
RUN /opt/venv/bin/pip install --constraint constraints.txt . \
    && /opt/venv/bin/pip uninstall --yes pip setuptools \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib

FROM python:3.11.15-slim-bookworm AS runtime
# One fixed, non-root identity; deploy/k8s/base/deployment.yaml runs as the same IDs. The
# base image's own pip goes too: nothing is installed into the final image at run time.
RUN groupadd --system --gid 10001 worker \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin worker \
    && python -m pip uninstall --yes --quiet pip setuptools wheel
COPY --from=build /opt/venv /opt/venv
# The image runs with a read-only root filesystem: no bytecode is written at run time
# (it was compiled above) and temporary files go to /tmp, a volume in Kubernetes.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /app
USER 10001:10001
# The ops listener (/healthz, /readyz, /metrics) when LEASE_WORKER_OPS_PORT=9100.
EXPOSE 9100
# SIGTERM goes straight to lease-worker (exec form, PID 1), which drains and exits 0.
ENTRYPOINT ["lease-worker"]
CMD ["--help"]
