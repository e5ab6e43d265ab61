"""The `pgcdc` command (`main`) and the spark-submit entry point (`job`): they parse arguments
and call typed functions of `pgcdc.sync`, `pgcdc.source` and `pgcdc.lake`."""
