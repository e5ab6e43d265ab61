"""Test configuration: fixtures come from the plugins below (psycopg's layout)."""

pytest_plugins = ["fixtures.pg", "fixtures.spark", "fixtures.ingest"]
