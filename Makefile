# Airboard: `make run` starts everything, `make test` runs the whole suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test e2e lint fmt migrate seed clean

$(STAMP): requirements.txt requirements-dev.txt
	@command -v $(PYTHON) >/dev/null || { echo "Airboard needs $(PYTHON) on PATH (or: make PYTHON=/path/to/python3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

run: $(STAMP)
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
	$(PY) manage.py makemigrations --check --dry-run

fmt: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

migrate: $(STAMP)
	$(PY) manage.py migrate

seed: $(STAMP)
	$(PY) manage.py seed_demo

clean:
	rm -rf $(VENV) var staticfiles
