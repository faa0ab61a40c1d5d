"""The pipeline declaration: the model, its YAML loader and validation (file, line, field).

Public: `load_pipeline`, `parse_pipeline` and the model objects; every other package reads these."""

from __future__ import annotations

from lakehouse.declaration.model import (  # noqa: F401
    IDENTIFIER,
    DECIMAL,
    SIMPLE_TYPES,
    SEQUENCE_RULES,
    SOURCE_KINDS,
    REPLICA_IDENTITIES,
    JOIN_TYPES,
    PK_JOIN_TYPES,
    EXPRESSION_JOIN_TYPES,
    WINDOW_JOIN_TYPES,
    TRIGGERS,
    CONTINUOUS_SCHEDULES,
    REFRESH_MODES,
    STARTING_OFFSETS,
    RULE_KINDS,
    ROW_RULE_KINDS,
    RULE_SEVERITIES,
    Column,
    ForeignKey,
    Rule,
    Source,
    Join,
    Window,
    ViewColumn,
    View,
    KafkaSettings,
    TableNames,
    Options,
    Pipeline,
    iter_foreign_key_relations,
)
from lakehouse.declaration.located import (  # noqa: F401
    Located,
    Problems,
)
from lakehouse.declaration.loader import (  # noqa: F401
    load_pipeline,
    parse_pipeline,
)
