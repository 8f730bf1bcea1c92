# Two commands a fresh machine needs: `make book` and `make test`. Both create .venv when missing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: book test lab lab-instructor hub clean grade figures lint

$(PY):
	@echo "==> creating virtual environment in $(VENV)"
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run make PYTHON=python3"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the dependency lists change.
$(STAMP): requirements.txt pyproject.toml | $(PY)
	@echo "==> installing requirements (first run takes a few minutes)"
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip check
	@touch $(STAMP)

# The local JupyterHub (make hub, tests/test_hub.py): JupyterHub from PyPI, configurable-http-proxy from npm.
# The stamp is left untouched while npm is missing, so the next run tries again.
HUB_STAMP := $(VENV)/.hub-installed
$(HUB_STAMP): requirements-hub.txt hub/package.json hub/package-lock.json $(STAMP)
	$(PY) -m pip install --quiet -r requirements-hub.txt
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix hub --no-audit --no-fund --silent && touch $(HUB_STAMP); \
	else echo "warning: npm not found; the local JupyterHub needs Node.js (apt-get install nodejs npm)"; fi

book: $(STAMP)
	@echo "==> building the book into _build/html (executing every chapter; warnings are errors)"
	$(VENV)/bin/jupyter-book build . --warningiserror --keep-going
	@echo "==> open _build/html/index.html"

test: $(STAMP) $(HUB_STAMP)
	@echo "==> running the test suite"
	$(VENV)/bin/python -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .

figures: $(STAMP)
	$(PY) -m stage5 figures

# make grade ASSIGNMENT=ex03 grades another exercise (default ex01).
ASSIGNMENT ?= ex01
grade: $(STAMP)
	@echo "==> autograding every $(ASSIGNMENT) submission in grader/inbox"
	$(PY) grader/grade.py --assignment $(ASSIGNMENT)

# Learners get a lab without the instructor tools, instructors one with Formgrader and its exchange; each
# reads its own config folder (hub/lab_profiles.py), so nothing global changes.
lab: $(STAMP)
	$(PY) hub/lab_profiles.py learner .jupyter/learner
	JUPYTER_CONFIG_DIR=.jupyter/learner $(VENV)/bin/jupyter lab --allow-root

lab-instructor: $(STAMP)
	$(PY) hub/lab_profiles.py instructor .jupyter/instructor
	JUPYTER_CONFIG_DIR=.jupyter/instructor $(VENV)/bin/jupyter lab --allow-root

# A JupyterHub for the course on this machine, for trials only (run as root; Ctrl-C stops it).
hub: $(HUB_STAMP)
	$(PY) hub/local_hub.py

clean:
	rm -rf _build .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +
