# Two commands a fresh machine needs: `make book` and `make test`. Both create .venv when missing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: book test lab clean grade figures lint

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

book: $(STAMP)
	@echo "==> building the book into _build/html (executing every chapter; warnings are errors)"
	$(VENV)/bin/jupyter-book build . --warningiserror --keep-going
	@echo "==> open _build/html/index.html"

test: $(STAMP)
	@echo "==> running the test suite"
	$(VENV)/bin/python -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .

figures: $(STAMP)
	$(PY) -m stage5 figures

# make grade ASSIGNMENT=ex03 grades another exercise (default ex01); JOBS=2 grades two submissions at a time.
ASSIGNMENT ?= ex01
JOBS ?= 1
grade: $(STAMP)
	@echo "==> autograding every $(ASSIGNMENT) submission in grader/inbox"
	$(PY) grader/grade.py --assignment $(ASSIGNMENT) --jobs $(JOBS)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --allow-root

clean:
	rm -rf _build .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +
