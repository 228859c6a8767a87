# syntax=docker/dockerfile:1
#
# lease-worker: a slim, non-root image. Build from the repository root:
#   scripts/image                      (docker or podman, whichever works here)
#   docker build -t lease-worker:0.1.0 .
# Reproducible: every package comes in at the exact version constraints.txt pins (the
# versions the tests ran with; scripts/lock writes it), the build backend included; and two
# builds of one commit give one digest: scripts/image passes SOURCE_DATE_EPOCH (the commit's
# time) and has the engine write every timestamp as that (docker: BuildKit's
# rewrite-timestamp; podman: --timestamp); the bytecode carries no time (unchecked-hash
# .pyc, compiled with one hash seed) and the files this file writes get that time too.
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
# The commit's time (scripts/image); 0 when not given, so a build is reproducible anyway.
ARG SOURCE_DATE_EPOCH=0
# PIP_CONSTRAINT reaches pip's isolated build of the wheel too: setuptools is pinned there.
# No bytecode from running pip itself: the only .pyc files are compileall's, below.
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/src/constraints.txt \
    PYTHONDONTWRITEBYTECODE=1
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
# Bytecode is compiled once, as unchecked-hash .pyc (no source time inside; the image never
# changes its sources) with a fixed hash seed (set and frozenset constants keep one order),
# and every file gets SOURCE_DATE_EPOCH as its time.
RUN /opt/venv/bin/pip install --no-compile --constraint constraints.txt . \
    && /opt/venv/bin/pip uninstall --yes pip setuptools \
    && PYTHONHASHSEED=0 /opt/venv/bin/python -m compileall -q \
       --invalidation-mode unchecked-hash /opt/venv/lib \
    && find /opt/venv -exec touch --no-dereference --date="@${SOURCE_DATE_EPOCH}" {} +

FROM python:3.11.15-slim-bookworm AS runtime
ARG SOURCE_DATE_EPOCH=0
# One fixed, non-root identity; deploy/k8s/base/deployment.yaml runs as the same IDs. The
# base image's own pip goes too: nothing is installed into the final image at run time.
# useradd dates the account from SOURCE_DATE_EPOCH (/etc/shadow), writes no lastlog or
# faillog entry (--no-log-init), and what this step changed gets SOURCE_DATE_EPOCH as its
# time (found as newer than a marker made first).
RUN touch /tmp/.step \
    && groupadd --system --gid 10001 worker \
    && useradd --system --no-log-init --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin worker \
    && PYTHONDONTWRITEBYTECODE=1 python -m pip uninstall --yes --quiet pip setuptools wheel \
    && find / -xdev -newer /tmp/.step -not -path /tmp/.step \
       -exec touch --no-dereference --date="@${SOURCE_DATE_EPOCH}" {} + \
    && rm /tmp/.step && touch --date="@${SOURCE_DATE_EPOCH}" /tmp
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
