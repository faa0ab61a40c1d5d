"""Data quality: great-expectations suites derived from the pipeline declaration, and their runner.

Results land in `<quality_schema>.expectation_results` for dashboards.
"""
