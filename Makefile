# Two commands a fresh machine needs: `make book` and `make test`. Both create .venv when missing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: book book-under-load test lab lab-instructor hub clean grade figures lint sync dist

$(PY):
	@echo "==> creating virtual environment in $(VENV)"
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run make PYTHON=python3"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the dependency lists change.
$(STAMP): requirements.txt requirements-book.txt pyproject.toml | $(PY)
	@echo "==> installing requirements into $(VENV) (first run: a few minutes, about 1.6 GB; a line every 30 s)"
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) scripts/with_progress.py "installing requirements" -- $(PY) -m pip install --quiet -r requirements.txt
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

# No --keep-going: a chapter that fails or times out stops the build, so no page is published with empty glue.
book: $(STAMP)
	@echo "==> building the book into _build/html (executing every chapter; warnings are errors)"
	$(PY) scripts/with_progress.py "building the book" -- $(VENV)/bin/jupyter-book build . --warningiserror
	@echo "==> open _build/html/index.html"

# The same build, from scratch (every chapter executed, this machine calibrated afresh), while three CPU-bound
# processes compete for the cores: slow and busy machines are the normal case.
LOAD_OUT ?= /tmp/stage5-book-under-load
book-under-load: $(STAMP)
	rm -rf $(LOAD_OUT) && mkdir -p $(LOAD_OUT)/cache
	STAGE5_CACHE_DIR=$(LOAD_OUT)/cache $(PY) scripts/with_cpu_load.py 3 -- \
		$(VENV)/bin/jupyter-book build . --warningiserror --path-output $(LOAD_OUT)
	@echo "==> built under load into $(LOAD_OUT)/_build/html"

# Two workers by default (CI has two cores): tests that share the book build, or a file's graded class, stay on one
# worker (tests/conftest.py). TEST_WORKERS=0 runs everything in this process.
TEST_WORKERS ?= 2

test: $(STAMP) $(HUB_STAMP)
	@echo "==> running the test suite on $(TEST_WORKERS) workers"
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=20

lint: $(STAMP)
	$(VENV)/bin/ruff check .

figures: $(STAMP)
	$(PY) -m stage5 figures

# make grade ASSIGNMENT=ex03 grades another exercise (default ex01); JOBS=2 grades two submissions at a time;
# ROSTER=roster.csv names the learners in Formgrader (columns id,first_name,last_name).
ASSIGNMENT ?= ex01
JOBS ?= 1
ROSTER ?=
grade: $(STAMP)
	@echo "==> autograding every $(ASSIGNMENT) submission in grader/inbox"
	$(PY) grader/grade.py --assignment $(ASSIGNMENT) --jobs $(JOBS) $(if $(ROSTER),--roster "$(ROSTER)")

# After editing course.toml (repository, release, hub) or a notebook's first cell: regenerate the setup cells,
# _config.yml's launch settings, the exercises page, exercise 2's shipped reference runs, the releases in exercises/
# and the grading fixtures.
ASSIGNMENTS := $(notdir $(wildcard solutions/*))
sync: $(STAMP)
	$(PY) scripts/sync_settings.py
	$(PY) scripts/ex02_visible_runs.py
	@for a in $(ASSIGNMENTS); do $(PY) grader/grade.py release --assignment $$a || exit 1; done
	@cd tests/submissions && for f in make_fixtures*.py; do ../../$(PY) $$f >/dev/null || exit 1; done
	$(PY) scripts/sync_settings.py --check

# The release's wheel and sdist in dist/ (RELEASING.md), and the built book as one zip a reader opens from disk
# (it needs no network). The wheel is built from the sdist in a temporary folder, so no build/ is left behind
# and nothing untracked slips in.
dist: book
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .
	$(PY) scripts/pack_site.py --html _build/html --out dist
	@ls dist

# Learners get a lab without the instructor tools, instructors one with Formgrader and its exchange; each
# reads its own config folder (hub/lab_profiles.py), so nothing global changes.
# A learner's lab opens their working copy (WORK, default my-work/, ignored by git): the release and the chapters
# are copied there once (hub/learner_copy.py), so a saved answer never edits exercises/ and git status stays clean.
WORK ?= my-work
lab: $(STAMP)
	$(PY) hub/lab_profiles.py learner .jupyter/learner
	$(PY) hub/learner_copy.py "$(WORK)"
	JUPYTER_CONFIG_DIR=.jupyter/learner $(VENV)/bin/jupyter lab --allow-root --ServerApp.root_dir="$(WORK)"

lab-instructor: $(STAMP)
	$(PY) hub/lab_profiles.py instructor .jupyter/instructor
	JUPYTER_CONFIG_DIR=.jupyter/instructor $(VENV)/bin/jupyter lab --allow-root

# A JupyterHub for the course on this machine, for trials only (run as root; Ctrl-C stops it).
hub: $(HUB_STAMP)
	$(PY) hub/local_hub.py

clean:
	rm -rf _build .pytest_cache .ruff_cache build dist
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +
