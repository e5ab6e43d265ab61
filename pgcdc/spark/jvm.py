"""Small bridges to Scala objects through Py4J (Seq, Option, Map), for the Delta calls
that PySpark does not expose (the fast engine, pgcdc/engines/fast). Kept in one place so a Delta upgrade that
changes them fails here, loudly."""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")
U = TypeVar("U")


def cls(spark: "SparkSession", name: str) -> Any:
    """The JVM class `name` (fully qualified). `spark._jvm.a.b.C` asks the JVM about each
    dotted step, a Py4J round trip each (~0.1 ms; ~150 per batch); this asks nothing until
    a member is used."""
    jvm: Any = spark._jvm
    return _class(jvm._gateway_client, name)


@lru_cache(maxsize=None)
def _class(client: Any, name: str) -> Any:
    from py4j.java_gateway import JavaClass

    return JavaClass(name, client)


def seq(spark: "SparkSession", items: list[Any]) -> Any:
    """A Scala immutable Seq of the given JVM objects."""
    values = cls(spark, "java.util.ArrayList")()
    for item in items:
        values.add(item)
    return cls(spark, "scala.jdk.javaapi.CollectionConverters").asScala(values).toList()


def pylist(spark: "SparkSession", scala_seq: Any) -> list[Any]:
    """The elements of a Scala Seq. (By index: iterating the Java list through Py4J ends in a
    NoSuchElementException, which PySpark's error conversion turns into ~10 ms of calls.)"""
    values = cls(spark, "scala.jdk.javaapi.CollectionConverters").asJava(scala_seq)
    return [values.get(i) for i in range(values.size())]


def some(spark: "SparkSession", value: Any) -> Any:
    return cls(spark, "scala.Option").apply(value)


def none(spark: "SparkSession") -> Any:
    return cls(spark, "scala.Option").empty()


def optional(option: Any) -> Any | None:
    """The value of a Scala Option, or None."""
    return option.get() if option.isDefined() else None


def kept(spark: "SparkSession", key: object, make: Callable[[], T]) -> T:
    """What `make` returns, made once per Spark session and `key`: JVM objects every batch would
    otherwise build anew, a Py4J round trip per part. Forgotten with their session."""
    made = _KEPT.setdefault(spark, {})
    if key not in made:
        made[key] = make()
    return made[key]  # type: ignore[no-any-return]


_KEPT: "weakref.WeakKeyDictionary[SparkSession, dict[object, Any]]" = weakref.WeakKeyDictionary()


def scala_map(spark: "SparkSession", entries: dict[str, Any]) -> Any:
    """A Scala immutable Map[String, V]."""
    result = cls(spark, "scala.Predef").Map().empty()
    for key, value in entries.items():
        result = result.updated(key, value)
    return result


# Each Python thread that calls the JVM gets a JVM thread of its own, which PySpark does
# not end with the Python thread (measured: +3.5 JVM threads per batch with a new pool per
# batch). Work that calls the JVM beside the main thread runs on this one thread instead.
_BACKGROUND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgcdc-background")


def in_background(work: Callable[[], T]) -> "Future[T]":
    """Start `work` on pgcdc's one background thread (after the work started there before it)."""
    return _BACKGROUND.submit(work)


def alongside(there: Callable[[], T], here: Callable[[], U]) -> tuple[T, U]:
    """Run `there` on pgcdc's one background thread while `here` runs on this one; both
    results. A failure of either propagates only once both have ended, so no step is left
    running behind the next one."""
    future = in_background(there)
    try:
        result = here()
    finally:
        wait([future])
    return future.result(), result


class SideThread:
    """One daemon thread for long JVM work beside the main thread (a compaction beside a
    run's batches): work runs in turn, each result or error (BaseException too) goes to
    its Future. A daemon, so a process told to stop at once is not held by the work."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.work: "queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]]]" = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def submit(self, work: Callable[[], T]) -> "Future[T]":
        future: Future[T] = Future()
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self.thread.start()
        self.work.put((future, work))
        return future

    def _loop(self) -> None:
        while True:
            future, work = self.work.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(work())
                except BaseException as exc:  # (a simulated crash too: the waiter re-raises it)
                    future.set_exception(exc)
