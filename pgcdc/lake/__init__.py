"""The Delta side of the data path: where a table lies, creating and copying it, the consumer
state committed with its data, the log read as files, and catalog registration.

Nothing here reads PostgreSQL: `pgcdc.source` is the other side, `pgcdc.engines` applies a
batch from one to the other, and `pgcdc.sync` runs the whole.
"""
