# Every target creates the virtualenv it needs: a fresh clone with only
# Python installed can run `make demo` and `make test` directly.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test flaky demo bench chaos lint test-live clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

test: install
	$(BIN)/python -m pytest -q

RUNS ?= 10
flaky: install
	$(BIN)/python scripts/flaky.py $(RUNS)

demo: install
	$(BIN)/team run examples/quickstart.yaml --root .demo --fresh

bench: install
	@for f in bench/*_bench.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

chaos: install
	$(BIN)/python -m pytest -q -m chaos

test-live: install
	$(BIN)/python -m pytest -q -m live

lint: install
	$(BIN)/ruff check orchestrator tests bench scripts
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .demo .pytest_cache
