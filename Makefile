# Two commands: `make demo` (a real sweep on the embedded simulator) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STUDY ?= demo-sim-$(shell date +%Y%m%d-%H%M%S)

REAL_STUDY := llamacpp-cpu-$(shell date +%Y%m%d-%H%M%S)
# llama.cpp's llama-server, built once per machine into ~/.cache (scripts/build_llama_server.sh)
LLAMA_SERVER := $(shell scripts/build_llama_server.sh --path)
DEMO_MODEL := models/random-8x512.gguf

.PHONY: demo demo-real bench-campaign-real test test-deps install install-test clean llama-server

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e .

install-test: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'

demo: install
	$(BIN)/sweeper sweep search_spaces/demo-sim.yaml --study $(STUDY)
	$(BIN)/sweeper leaderboard $(STUDY) --top 10 --csv results/$(STUDY)/leaderboard.csv
	$(BIN)/sweeper sim best search_spaces/demo-sim.yaml --study $(STUDY)

llama-server: $(LLAMA_SERVER)

$(LLAMA_SERVER): | $(BIN)/python
	PYTHON=$(BIN)/python scripts/build_llama_server.sh

$(DEMO_MODEL): | install
	$(BIN)/pip install --quiet -e '.[models]'
	$(BIN)/sweeper models make-gguf --layers 8 --width 512 --seed 0 --out $(DEMO_MODEL)

# A real engine here: sweep llama-server on a random-weight model (README "A real engine: llama.cpp").
demo-real: install llama-server $(DEMO_MODEL)
	$(BIN)/sweeper sweep search_spaces/llamacpp-cpu.yaml --study $(REAL_STUDY)
	$(BIN)/sweeper leaderboard $(REAL_STUDY) --top 10

# The campaign on the real engine (bench/README.md "campaign on llama.cpp"): winner, CI, tie or not.
bench-campaign-real: install llama-server $(DEMO_MODEL)
	$(BIN)/sweeper campaign search_spaces/llamacpp-cpu.yaml --study campaign-$(REAL_STUDY) --seed 0
	$(BIN)/sweeper best campaign-$(REAL_STUDY) --json

# The SSH tests start a real OpenSSH server (tests/support/sshd.py) and the report tests open the report in
# headless Chromium, and the many-hosts tests a private PostgreSQL cluster (tests/support/pg.py): install
# them when they are missing.
test-deps:
	@test -x /usr/sbin/sshd || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server)
	@test -n "$$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null)" || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql)
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

# Tests two at a time (pytest-xdist): run one by one they leave the 2 cores about half idle, waiting on
# servers, sockets and subprocesses (bench/test_suite.md). A module whose tests share an expensive module
# fixture carries one xdist_group and stays on one worker (--dist loadgroup). The tests marked `alone`
# catch a window of milliseconds or bound a delay, which a second worker's load would make them miss:
# they run after, one at a time. Both phases always run; the exit status is the first failure's.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider

# The layer contract first (pyproject.toml [tool.importlinter]; docs/architecture.md), then the tests.
# An editable install is not byte-compiled, and where PYTHONDONTWRITEBYTECODE is set (these machines)
# no process writes what it compiled: each of the suite's ~700 CLI and simulator processes would
# compile sweeper again, 0.25 s of every CLI start (bench/test_suite.md). compileall writes it once.
test: install-test test-deps llama-server
	$(BIN)/lint-imports
	$(BIN)/python -m compileall -q sweeper > /dev/null
	status=0; \
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup -m "not alone" || status=$$?; \
	$(PYTEST) -m alone || { rc=$$?; [ $$status -ne 0 ] || status=$$rc; }; \
	exit $$status

clean:
	rm -rf $(VENV) build *.egg-info
