# The two commands a newcomer needs: `make demo` and `make test`. Both set up first.
.PHONY: setup demo test

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/pgcdc demo

test: setup
	.venv/bin/pytest
