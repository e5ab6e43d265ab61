"""`python -m pgcdc.spark`: resolve the jars once and prove Delta works (scripts/setup.sh)."""

from pgcdc.spark.session import smoke_test

smoke_test()
