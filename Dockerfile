# syntax=docker/dockerfile:1
# The image of a worker machine: the product at the commit it is built from (the wheel's
# packages, prefect.yaml, automations.yaml and sources/; .dockerignore lets nothing else
# into the context: no dev tools, tests, benchmarks or docs), the dependencies locked in
# uv.lock (no dev tools), git for the pull step of nightly-cluster, a non-root user, and
# `ingest` and `prefect` on the PATH.
#
#   docker build -t nightly-ingest .
#   docker run --rm -e PREFECT_API_URL=http://prefect.example.com:4200/api \
#       -v /srv/ingest:/data nightly-ingest        # a worker of the pool ingest-cluster
#
# The dependency layer changes only with uv.lock; the project layer with the code.
FROM python:3.11-slim-bookworm

COPY --from=ghcr.io/astral-sh/uv:0.13.8 /uv /uvx /usr/local/bin/

RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 ingest \
    && mkdir /app /opt/venv /data \
    && chown ingest:ingest /app /opt/venv /data

# The environment belongs to the worker's user: the pull step of nightly-cluster syncs the
# lock of the ref it clones into it (deployments/steps.py).
ENV UV_PROJECT_ENVIRONMENT=/opt/venv \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    INGEST_DATA_DIR=/data

USER ingest
WORKDIR /app

COPY --chown=ingest:ingest pyproject.toml uv.lock README.md ./
RUN --mount=type=cache,target=/home/ingest/.cache/uv,uid=10001,gid=10001 \
    uv sync --frozen --no-dev --no-install-project

# The product only (.dockerignore).
COPY --chown=ingest:ingest . .
RUN --mount=type=cache,target=/home/ingest/.cache/uv,uid=10001,gid=10001 \
    uv sync --frozen --no-dev --no-editable

CMD ["prefect", "worker", "start", "--pool", "ingest-cluster", "--type", "process"]
