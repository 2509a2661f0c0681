# The two commands a newcomer needs:  make demo   and   make test
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Python caches each module's compiled bytecode (__pycache__, git-ignored) unless
# PYTHONDONTWRITEBYTECODE is set, as some CI images and containers do. Then every process -- the
# suite's pytest workers and the servers, workers and agents it starts, the demo's processes --
# compiles every module it imports from source again: `manage.py check` took 11 s instead of
# 3.8 s on a 2-core machine. The first process to import a module now leaves its bytecode for
# the rest.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test setup browser services lint bench mutate mutate-fast clean

# uv installs the ~150 packages in seconds where pip takes minutes (19 s against 9 min on a
# loaded 2-core machine); pip does it where uv cannot be had.
$(VENV)/.installed: pyproject.toml collectors/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	($(PIP) install -q uv && $(VENV)/bin/uv pip install -q --python $(PY) -e ".[test]") || \
	  ($(PIP) install -q --upgrade pip && $(PIP) install -q -e ".[test]")
	touch $@

setup: $(VENV)/.installed

# Demo on the embedded default: SQLite, in-process tasks, a simulated agent feeding live data.
demo: setup
	$(PY) manage.py demo

# Debian packages the suite uses: Chromium for the Playwright tests (Playwright's own browser
# download is not used), DejaVu and Noto CJK fonts that report PDFs embed, and Prometheus, which
# tests/kpis/test_prometheus.py starts on loopback. Installed only where missing.
DEBIAN_PACKAGES := chromium fonts-dejavu-core fonts-noto-cjk prometheus
browser:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian's $$missing"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $$missing >/dev/null; \
	fi

services:
	bash .ci/services

# ruff, then the import contracts of pyproject.toml [tool.importlinter] (ARCHITECTURE.md): an
# import against the layers fails here. PYTHONPATH=. so the checkout is what gets analysed.
lint: setup
	$(VENV)/bin/ruff check .
	PYTHONPATH=. $(VENV)/bin/lint-imports

# The whole suite against real PostgreSQL and Redis (started if they are not running), on every
# core (at most 8 workers): each pytest-xdist worker has its own test database and Redis database
# (tests/services.py); --dist loadgroup keeps a module's xdist_group on one worker; the 20 slowest
# tests are listed at the end. Exit status 5 (no tests collected) fails like any other.
# tests/dashboards/test_small_screens.py leaves a screenshot of every page at 390 and 1440 px in
# artifacts/screenshots/<width>/<url-name>.png (git-ignored): keep that folder as a CI artifact.
TEST_WORKERS ?= auto
test: setup browser services lint
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --maxprocesses 8 --dist loadgroup --durations=20

bench: setup services
	$(PY) bench/ingest
	$(PY) bench/ingest_layers
	$(PY) bench/dashboard
	$(PY) bench/agent
	$(PY) bench/gate

# Mutation testing of the accounting core (mutmut, one worker, module by module; NOT part of
# `make test` or CI: it takes tens of minutes). `make mutate MODULES="store metrics"` for some;
# survivors and their explanations: tests/mutation/SURVIVORS.md.
# `make mutate-fast MODULES="cost-accounting wire"` (default: all): the same mutants and
# verdicts, but every mutant of a module in ONE pytest session (tests/mutation/session.py; minutes instead of hours
# for a module whose tests need Django and the database).
mutate: setup services
	$(PY) tests/mutation/run.py $(MODULES)

mutate-fast: setup services
	for m in $(or $(MODULES),$$($(PY) tests/mutation/run.py --list | cut -d' ' -f1)); do \
		$(PY) tests/mutation/session.py $$m || exit 1; done

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache .ruff_cache
