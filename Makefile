# The two set-up commands of README.md are `make demo` and `make test`; each installs what it
# needs first (idempotent), then runs.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench lint mutation install install-test clean

install:
	scripts/bootstrap.sh core

install-test:
	scripts/bootstrap.sh test

demo: install
	$(BIN)/rackscale demo

test: install-test
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/lint-imports --no-logo
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider --timeout=900

# Benchmarks print ratios against a baseline measured in the same run; figures go to
# BENCHMARKS.md with the command that produced them. QUICK=1 runs the short versions. Every
# script runs even when an earlier one misses its target; the summary line names the misses.
# Not part of `test`: QUICK=1 takes about 5 minutes on the 2-core machine, `test` already
# about 25 of its 30, and a missed speed goal must not fail a correctness run.
bench: install-test
	@missed=""; for b in bench/bench_*.py; do \
	  echo "== $$b"; $(BIN)/python $$b $(if $(QUICK),--quick,) || missed="$$missed $$b"; done; \
	if [ -n "$$missed" ]; then echo "target missed or error in:$$missed"; exit 1; fi

# Mutation testing of the modules that decide (TESTING.md); not part of `test`: it runs each
# module's focused tests once per mutant. MODULES=certify/localize.py limits it to some.
mutation: install-test
	nice -n 10 $(BIN)/python scripts/mutation.py $(if $(JOBS),--jobs $(JOBS),) $(MODULES)

lint: install-test
	$(BIN)/ruff check src tests bench scripts

clean:
	rm -rf rackscale-data .pytest_cache .ruff_cache .mypy_cache
