"""Remembered py4j class and static-method lookups for a local (py4j) Spark driver.

PySpark resolves a JVM class or static method by a py4j round trip on every use: each
`F.col`, `F.lit`, `F.when` asks the JVM for `org.apache.spark.sql.functions` and then for the
method, and `PythonUtils` or `PythonSQLUtils` are looked up through the gateway's imports, which
first searches the whole class path for a class of that bare name and misses. A two-change silver
batch made ~1,200 such lookups (0.4-1.0 ms each). A class, once found, and its static methods do
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
        if isinstance(member, (JavaMember, JavaClass)):  # never a field's value: that may change
            if isinstance(member, JavaClass) and not isinstance(member, CachedJavaClass):
                member = CachedJavaClass(member._fqn, member._gateway_client)
            self.__dict__[name] = member  # found by plain attribute access from now on
        return member


class CachedJVMView(JVMView):
    """A `JVMView` that keeps the classes it found by name (`jvm.PythonUtils`,
    `getattr(jvm, "org.apache.spark.sql.functions")`) as `CachedJavaClass`es."""

    def __getattr__(self, name: str) -> Any:
        found = super().__getattr__(name)
        if isinstance(found, JavaClass):
            found = CachedJavaClass(found._fqn, found._gateway_client)
            self.__dict__[name] = found
        return found


def remember_lookups(view: JVMView) -> None:
    """Make the gateway's view (`SparkContext._jvm`, which PySpark's sessions share) remember
    classes and static methods from now on. Idempotent; the view keeps its gateway and imports."""
    if type(view) is JVMView:
        view.__class__ = CachedJVMView
