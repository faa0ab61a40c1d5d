"""The jobs: thin entry points (`python -m jobs.<name>`), the same on Databricks and locally.

Each parses its arguments and hands the rest to `lakehouse.entry` (pipeline, Kafka, trigger, exit codes).
"""
