# Airboard: `make run` starts everything, `make test` runs the whole suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# Running needs requirements.txt alone; the test and lint tools (pytest, Playwright, MLflow's
# server, schemathesis, ruff, mypy) come with requirements-dev.txt, installed only for test and lint.
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: run test e2e lint fmt migrate seed clean

$(RUN_STAMP): requirements.txt
	@command -v $(PYTHON) >/dev/null || { echo "Airboard needs $(PYTHON) on PATH (or: make PYTHON=/path/to/python3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP) requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

run: $(RUN_STAMP)
	$(PY) manage.py runall

# The whole suite, the browser tests (tests/e2e, skipped without Chromium) included.
test: $(STAMP)
	$(PY) -m pytest

# Only the browser tests; screenshots land in artifacts/screenshots/.
e2e: $(STAMP)
	$(PY) -m pytest -m e2e tests/e2e

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) manage.py makemigrations --check --dry-run

fmt: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

migrate: $(RUN_STAMP)
	$(PY) manage.py migrate

seed: $(RUN_STAMP)
	$(PY) manage.py seed_demo

clean:
	rm -rf $(VENV) var staticfiles
