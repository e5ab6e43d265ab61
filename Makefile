# The two commands a newcomer needs: `make demo` and `make test`. Both set up first.
.PHONY: setup demo test lint compat

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/pgcdc demo

# lint, the whole suite on the pinned pyspark/delta-spark pair, then the merge engine on the
# second supported pair (scripts/compat.sh)
test: setup lint
	.venv/bin/pytest
	bash scripts/compat.sh

lint: setup
	.venv/bin/ruff check pgcdc tests bench jobs
	.venv/bin/mypy pgcdc
	.venv/bin/mypy --strict --follow-imports=silent pgcdc/engines pgcdc/tablelog.py

compat: setup
	bash scripts/compat.sh
