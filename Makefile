# Every target creates the virtualenv it needs: a fresh clone with only
# Python installed can run `make demo` and `make test` directly.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install browser test flaky demo bench chaos lint test-live clean

install: $(STAMP)

# The board's browser tests and bench drive Debian's chromium through Debian's chromedriver.
# Already there: nothing to do. As root with apt (CI on a fresh Debian): installed here.
# Otherwise: say how; TEAM_SKIP_BROWSER=1 skips those tests instead.
browser:
	@if [ "$$TEAM_SKIP_BROWSER" = 1 ] || { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's chromium and chromium-driver (the board's browser tests)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else \
	  echo "the board's browser tests need Debian's chromium and chromium-driver:" \
	       "sudo apt-get install chromium chromium-driver (or TEAM_SKIP_BROWSER=1 make test to skip them)" >&2; \
	  exit 1; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

test: install browser
	$(BIN)/python -m pytest -q

RUNS ?= 10
flaky: install
	$(BIN)/python scripts/flaky.py $(RUNS)

demo: install
	$(BIN)/team run examples/quickstart.yaml --root .demo --fresh

bench: install browser
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
