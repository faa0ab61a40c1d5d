"""Remembered py4j class and static-method lookups for a local (py4j) Spark driver.

PySpark resolves a JVM class or static method by a py4j round trip on every use: each
`F.col`, `F.lit`, `F.when` asks the JVM for `org.apache.spark.sql.functions` and then for the
method, and `PythonUtils` or `PythonSQLUtils` are looked up through the gateway's imports, which
first searches the whole class path for a class of that bare name and misses. A two-change silver
batch made ~1,200 such lookups (0.5-1.0 ms each). A class, once found, and its static methods do
not change while the JVM lives, so the answers are kept on the Python side after the first
lookup; field values and packages are still asked every time.

Only local drivers install it (`lakehouse.spark.build_local_spark`); Spark Connect (Databricks
serverless) has no py4j gateway.
"""

from __future__ import annotations

from typing import Any

from py4j.java_gateway import JavaClass, JavaMember, JVMView


class CachedJavaClass(JavaClass):
    """A `JavaClass` that keeps its static methods and nested classes once looked up."""

    def __getattr__(self, name: str) -> Any:
        member = super().__getattr__(name)
        if isinstance(member, JavaClass):
            return _keep_class(self, name, member)
        if isinstance(member, JavaMember):  # never a field's value: that may change
            self.__dict__[name] = member  # found by plain attribute access from now on
        return member


class CachedJVMView(JVMView):
    """A `JVMView` that keeps the classes it found by name (`jvm.PythonUtils`,
    `getattr(jvm, "org.apache.spark.sql.functions")`) as `CachedJavaClass`es."""

    def __getattr__(self, name: str) -> Any:
        found = super().__getattr__(name)
        return _keep_class(self, name, found) if isinstance(found, JavaClass) else found


def _keep_class(owner: Any, name: str, found: JavaClass) -> CachedJavaClass:
    """`found` as a `CachedJavaClass`, stored as `owner`'s attribute `name`: plain attribute
    access finds it from now on."""
    kept = owner.__dict__[name] = CachedJavaClass(found._fqn, found._gateway_client)
    return kept


def remember_lookups(view: JVMView) -> None:
    """Make the gateway's view (`SparkContext._jvm`, which PySpark's sessions share) remember
    classes and static methods from now on. Idempotent; the view keeps its gateway and imports."""
    if type(view) is JVMView:
        view.__class__ = CachedJVMView
