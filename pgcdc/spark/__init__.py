"""Spark as pgcdc uses it: the session with Delta and the JDBC driver (`session`), object
storage (`storage`), the log store for local tables (`logstore`) and the JVM bridges for the
calls PySpark does not expose (`jvm`). Foundation: everything above may use it."""
