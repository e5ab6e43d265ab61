# The two commands a newcomer needs: `make demo` and `make test`. Both set up first.
.PHONY: setup demo test lint compat pg18

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/pgcdc demo

# the whole suite on the pinned pyspark/delta-spark pair and, beside it, lint, the merge engine on
# the second supported pair (scripts/compat.sh), capture, security, lifecycle and one randomized
# schedule on PostgreSQL 18 (scripts/pg18.sh) and the process-heavy tests: scripts/suite.sh
test: setup
	bash scripts/suite.sh

lint: setup
	.venv/bin/ruff check pgcdc tests bench jobs
	.venv/bin/mypy pgcdc  # strict (pyproject.toml [tool.mypy])
	.venv/bin/lint-imports  # the layering (pyproject.toml [tool.importlinter], docs/architecture.md)

compat: setup
	bash scripts/compat.sh

pg18: setup
	bash scripts/pg18.sh
