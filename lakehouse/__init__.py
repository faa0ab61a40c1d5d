"""cdc-enrich engine: keeps Delta gold tables equal to the SQL join of Debezium-captured sources.

Nothing in this package knows a particular schema: every table, key and join comes from a
pipeline declaration (see :mod:`lakehouse.declaration`).
"""

__version__ = "0.1.0"
