"""Benchmarks (`cdc-enrich bench ...`): each against a baseline measured side by side in the same run."""
