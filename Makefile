# Every target creates the virtualenv it needs: a fresh clone with only
# Python installed can run `make demo` and `make test` directly.
# System packages the tests use for real (bubblewrap, chromium, iproute2) come from `make sysdeps`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install sysdeps test flaky demo bench chaos lint test-live clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# Debian packages the tests use for real: bubblewrap (agents' shell commands run in it,
# orchestrator/core/sandbox.py), and chromium with its chromedriver (the board's browser
# tests and bench). Present: nothing to do. Missing, as root with apt (CI on a fresh
# Debian): installed in one apt-get. Otherwise: say how. TEAM_SKIP_BROWSER=1 skips the
# browser tests instead of needing chromium.
sysdeps:
	@need=""; \
	command -v bwrap >/dev/null 2>&1 || need="$$need bubblewrap"; \
	command -v ip >/dev/null 2>&1 || need="$$need iproute2"; \
	command -v unshare >/dev/null 2>&1 || need="$$need util-linux"; \
	if [ "$$TEAM_SKIP_BROWSER" != 1 ]; then \
	  command -v chromium >/dev/null 2>&1 || need="$$need chromium"; \
	  command -v chromedriver >/dev/null 2>&1 || need="$$need chromium-driver"; \
	fi; \
	if [ -z "$$need" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian packages the tests use:$$need"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need >/dev/null || exit 1; \
	else \
	  echo "missing Debian packages:$$need (bubblewrap: agents' shell commands run in it; iproute2," \
	       "util-linux: the Ray tests' network namespace (unshare -n, ip link set lo up);" \
	       "chromium, chromium-driver: the board's browser tests, or TEAM_SKIP_BROWSER=1)." >&2; \
	  echo "Install them (sudo apt-get install$$need), then run make again." >&2; \
	  exit 1; \
	fi

# The suite runs on two workers (pytest-xdist), a whole test module per worker at a time
# (--dist loadfile: a module's shared browser or cluster starts once, its tests keep their
# order). Every test makes its own state root, repository, ports and processes, so the two
# halves cannot see each other; most tests wait on the processes they start, so a second
# worker uses the second core. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile

test: install sysdeps
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

RUNS ?= 10
flaky: install sysdeps
	$(BIN)/python scripts/flaky.py $(RUNS) -- $(PYTEST_PARALLEL)

demo: install
	$(BIN)/team run examples/quickstart.yaml --root .demo --fresh

bench: install sysdeps
	@for f in bench/*_bench.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

chaos: install sysdeps
	$(BIN)/python -m pytest -q -m chaos

test-live: install
	$(BIN)/python -m pytest -q -m live

lint: install
	$(BIN)/ruff check orchestrator tests bench scripts
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .demo .pytest_cache
