"""The test kit: the Debezium workload simulator, the PostgreSQL workload driver, a reference silver, benchmarks.

Not part of the deployed wheel; it may import the engine, never the other way."""
