"""The app on top: the `cdc-enrich` command and the demo.

It may use the engine, the local stack and the test kit; nothing imports it."""
