# Two commands: `make demo` (a real sweep on the embedded simulator) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STUDY ?= demo-sim-$(shell date +%Y%m%d-%H%M%S)

.PHONY: demo test test-deps install install-test clean

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

# The SSH tests start a real OpenSSH server (tests/sshd.py): install it when it is missing.
test-deps:
	@test -x /usr/sbin/sshd || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server)

test: install-test test-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider

clean:
	rm -rf $(VENV) build *.egg-info
