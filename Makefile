# Every target creates the virtualenv it needs: a fresh clone with only
# Python installed can run `make demo` and `make test` directly.
# Agents' shell commands run in bubblewrap (orchestrator/core/sandbox.py), and the
# tests run them for real: `make test` installs it (Debian's `bubblewrap`) when it
# is missing and we are root, as on CI, and otherwise says how to.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install sandbox test flaky demo bench chaos lint test-live clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

sandbox:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "bwrap is missing: installing Debian's bubblewrap (agents' shell commands run in it)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null || exit 1; \
	  else \
	    echo "bwrap (bubblewrap) is missing: agents' shell commands run in it and the tests use it." >&2; \
	    echo "Install it (Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install bubblewrap), then run make again." >&2; \
	    exit 1; \
	  fi; }
	@command -v bwrap >/dev/null 2>&1 || { echo "bwrap is still not on PATH after installing bubblewrap" >&2; exit 1; }

test: install sandbox
	$(BIN)/python -m pytest -q

RUNS ?= 10
flaky: install sandbox
	$(BIN)/python scripts/flaky.py $(RUNS)

demo: install
	$(BIN)/team run examples/quickstart.yaml --root .demo --fresh

bench: install
	@for f in bench/*_bench.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

chaos: install sandbox
	$(BIN)/python -m pytest -q -m chaos

test-live: install
	$(BIN)/python -m pytest -q -m live

lint: install
	$(BIN)/ruff check orchestrator tests bench scripts
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .demo .pytest_cache
