"""The local stack, for development and tests only: a Kafka broker, PostgreSQL, Kafka Connect + Debezium.

Not part of the deployed wheel; the engine never imports it."""
