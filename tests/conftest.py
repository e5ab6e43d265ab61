"""Test configuration: fixtures come from the plugins below (psycopg's layout)."""

pytest_plugins = ["fixtures.jvm", "fixtures.pg", "fixtures.s3", "fixtures.spark", "fixtures.ingest", "fixtures.cluster"]
