"""Small bridges to Scala objects through Py4J (Seq, Option, Map), for the Delta calls
that PySpark does not expose (see apply.py). Kept in one place so a Delta upgrade that
changes them fails here, loudly."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def seq(spark: "SparkSession", items: list[Any]) -> Any:
    """A Scala immutable Seq of the given JVM objects."""
    jvm = spark._jvm
    values = jvm.java.util.ArrayList()
    for item in items:
        values.add(item)
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(values).toList()


def pylist(spark: "SparkSession", scala_seq: Any) -> list[Any]:
    """The elements of a Scala Seq. (By index: iterating the Java list through Py4J ends in a
    NoSuchElementException, which PySpark's error conversion turns into ~10 ms of calls.)"""
    values = spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(scala_seq)
    return [values.get(i) for i in range(values.size())]


def some(spark: "SparkSession", value: Any) -> Any:
    return spark._jvm.scala.Option.apply(value)


def none(spark: "SparkSession") -> Any:
    return spark._jvm.scala.Option.empty()


def optional(option: Any) -> Any | None:
    """The value of a Scala Option, or None."""
    return option.get() if option.isDefined() else None


def scala_map(spark: "SparkSession", entries: dict[str, Any]) -> Any:
    """A Scala immutable Map[String, V]."""
    result = spark._jvm.scala.Predef.Map().empty()
    for key, value in entries.items():
        result = result.updated(key, value)
    return result
