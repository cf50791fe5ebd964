# Two commands on a fresh machine with Python 3.11+ and make:
#   make demo   - the main job end to end on embedded defaults
#   make test   - the test suite
# Each bootstraps .venv from uv.lock (uv itself is installed from PyPI into .tools).

PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)
# Compile the dependencies' bytecode at install: a command then never compiles Prefect's
# 12,000 modules on start-up (1.9 s -> 1.0 s for `import prefect` where .pyc are not written).
export UV_COMPILE_BYTECODE := 1

.PHONY: setup demo serve dev-s3 test test-servers test-cluster chaos limits lint format docs docs-reference bench-s3 bench-whole bench-github bench-extract bench-tiny-extract bench-scale bench-dask bench-server-db bench-ab clean

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(VENV)/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --all-extras --group docs --python $(PYTHON)
	@touch $@

# The checkout's own modules compiled too, as an installed wheel's are: a command then reads
# their bytecode even where none is written (PYTHONDONTWRITEBYTECODE), instead of compiling
# about 15,000 lines each time (~0.07 s of CPU a command; benchmarks/whole.md). A module
# edited later is compiled afresh by Python itself, so nothing stale is ever run.
setup: $(VENV)/.synced
	@$(VENV)/bin/python -m compileall -q -j 0 ingest tasks flows cli deployments dev >/dev/null

# The demo is a development tool of the checkout (dev/demo.py), not a command of the package.
demo: setup
	$(VENV)/bin/python -m dev.demo

# The deployments of prefect.yaml on this machine, UI at http://127.0.0.1:4200 (Ctrl-C stops).
# SERVE_ARGS=--demo serves the demo of the checkout instead (dev/serve_demo.py): the local S3,
# GitHub and ticket API servers, seeded, and the deployments pointed at them
# (dev/prefect.demo.yaml over prefect.yaml); the other SERVE_ARGS go to either.
serve: setup
	$(if $(filter --demo,$(SERVE_ARGS)),$(VENV)/bin/python -m dev.serve_demo $(filter-out --demo,$(SERVE_ARGS)),$(VENV)/bin/ingest serve $(SERVE_ARGS))

# A local S3-compatible server holding the files of DIR, to try `ingest s3` on one's own
# files (dev/s3_folder.py): prints the endpoint, the bucket and the credentials to export
# (any value works), and serves until Ctrl-C. BUCKET (my-files) and PORT (9010) optional.
dev-s3: setup
	@test -n "$(DIR)" || { echo "usage: make dev-s3 DIR=path/to/folder [BUCKET=name] [PORT=9010]"; exit 2; }
	$(VENV)/bin/python -m dev.s3_folder "$(DIR)" $(if $(BUCKET),--bucket $(BUCKET)) $(if $(PORT),--port $(PORT))

# The suite in TEST_WORKERS processes (pytest-xdist; each has its own S3-compatible server
# and Prefect test server): most tests wait on servers and subprocesses, so two workers halve
# the wait even on 2 cores. TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= auto
test: setup
	$(UV) lock --check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --maxprocesses 4 $(PYTEST_ARGS)

# The tests that start servers of their own (about 5 min): `ingest serve` with API auth and
# on PostgreSQL, prefect.yaml deployed on a `prefect server start` with a worker and the UI
# in Chromium, the alerts, a new machine's first command and its Ctrl-C. .ci/run runs them.
test-servers: setup
	$(VENV)/bin/pytest -m server $(PYTEST_ARGS)

# The long Dask scenarios (about 3 min): the ingest command from three folders with the
# downloads on object storage, a worker killed mid-run. `make test` runs the short one.
test-cluster: setup
	$(VENV)/bin/pytest -m cluster tests/flows/test_dask_cluster.py tests/flows/test_github_dask.py $(PYTEST_ARGS)

# The fault-injection suite, every trial (about 18 min); `make test` runs a short seeded
# subset of it. Writes chaos-results.json and the table of "Faults it survives" in
# docs/reliability.md.
chaos: setup
	rm -f chaos-results.json
	CHAOS_FULL=1 CHAOS_RESULTS=chaos-results.json $(VENV)/bin/pytest -m chaos $(PYTEST_ARGS); \
	status=$$?; $(VENV)/bin/python -m tests.chaos.table chaos-results.json docs/reliability.md; exit $$status

# Two `ingest github` commands under shared limits, and without them (the control);
# `make test` runs the same scenario with the plain fetch in two processes.
limits: setup
	LIMITS_FULL=1 $(VENV)/bin/pytest -m limits tests/ingest/rest/test_shared_limits.py $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# docs/reference/cli.md and settings.md, rendered from the code (the ingest command's
# options and help, every setting's variable, default and description): never edited.
docs-reference: setup
	$(VENV)/bin/python -m tools.gen_reference

# The documentation site into site/ (mkdocs.yml: MkDocs, Material theme, offline), with
# warnings (a broken link or anchor) as errors, after checking docs/reference/ is current.
docs: setup
	$(VENV)/bin/python -m tools.gen_reference --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench-s3: setup
	$(VENV)/bin/python -m benchmarks.bench_s3

# GitHub paging: the page-size scenarios, hidden ceilings, and the first contact (the flow's
# whole work beside the best fixed client); ARGS="--only first-contact --before main" runs the
# last alone, with the flow of main beside this tree's (about 4 min).
# Whole ingest commands, start-up included, beside import prefect and s5cmd (~10 min);
# ARGS="--before REV" measures a revision side by side.
bench-whole: setup
	$(VENV)/bin/python -m benchmarks.bench_whole $(ARGS)

bench-github: setup
	$(VENV)/bin/python -m benchmarks.bench_github $(ARGS)

bench-extract: setup
	$(VENV)/bin/python -m benchmarks.bench_extract $(ARGS)

bench-tiny-extract: setup
	$(VENV)/bin/python -m benchmarks.bench_tiny_extract $(ARGS)

# 50k/200k/1M objects, reruns and 30 nights (hours); ARGS="--sizes 2000 --nights 2" is a smoke run.
# The nights run a simulated day apart under libfaketime (Debian package faketime), installed
# here when missing; without it they run at the real clock and vacuum has nothing old to take.
bench-scale: setup
	@$(VENV)/bin/python -c "from benchmarks.bench_scale import find_faketime as f; exit(not f())" \
	  || { sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; $$sudo apt-get update -q \
	  && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q faketime; } \
	  || echo "libfaketime could not be installed: the nights run at the real clock"
	$(VENV)/bin/python -m benchmarks.bench_scale $(ARGS)

# ingest s3 on 1, 2 and 4 Dask workers beside the thread runner, 80 ms per request (~5 min).
bench-dask: setup
	$(VENV)/bin/python -m benchmarks.bench_dask $(ARGS)

# The Prefect server's database under several clients: SQLite and PostgreSQL side by side
# (needs Debian's postgresql package); ARGS="--clients 4 --tasks 500".
bench-server-db: setup
	$(VENV)/bin/python -m benchmarks.bench_server_db $(ARGS)

# The shared benchmarks on two git refs side by side, rounds interleaved, each ref in a
# temporary worktree with its own environment (benchmarks/bench_ab.py): writes
# benchmarks/refactor.md. ARGS="--before REF [--after REF] [--only whole,github] [--rounds N]".
bench-ab: setup
	$(VENV)/bin/python -m benchmarks.bench_ab $(ARGS)

clean:
	rm -rf $(VENV) $(TOOLS) data site .pytest_cache .ruff_cache .mypy_cache
