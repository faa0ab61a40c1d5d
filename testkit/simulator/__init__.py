"""The Debezium workload simulator: an OLTP database in memory, captured as Debezium would capture it.

Why: every guarantee of the service (convergence, no regression, exactly-once effect) is tested
against input that looks like production, including production's accidents, with the exact
database state known. The simulator is generic over the pipeline declaration: it derives values
from declared column types and column names, foreign keys from `Source.foreign_keys`, and takes
anything domain-specific (value pools, weights, TOAST columns) from an optional `workload.yml`
next to the pipeline file.

The model (a small PostgreSQL):
- tables hold rows by primary key; a transaction mutates them and emits one change per row
  touched, in order, each at its own WAL position (LSN); a primary-key update is one WAL record,
  so its delete and create share an LSN (as `lakehouse.ordering` expects);
- foreign keys behave as DEFERRABLE INITIALLY DEFERRED constraints checked at commit: a parent
  is deleted only after its children (in the same transaction), or is deleted and re-created
  with the same key in one transaction (chaos); rows of `kind: events` sources are never deleted,
  so a parent they reference is never deleted for good. Under heavy chaos some foreign keys
  dangle on purpose, as in databases where that constraint is not declared;
- the truth is the final content of every table, which is what PostgreSQL would hold.

Chaos (`none`, `some`, `heavy`) adds what production brings; see `CHAOS_PLANS`.

Modules: `records` (what it returns), `workload` (hints), `chaos`, `values`, `database`, `emitter`
(Debezium records), `driver` (the transactions), `timeline` (restarts, re-deliveries), `simulate`,
`produce` (to Kafka).
"""

from __future__ import annotations

from lakehouse.verify.truth import read_truth, read_truth_frames  # noqa: F401 (the truth files the simulation leaves)
from testkit.simulator.chaos import CHAOS_PLANS, ChaosPlan  # noqa: F401
from testkit.simulator.produce import produce  # noqa: F401
from testkit.simulator.records import WORKLOAD_FILE, KafkaRecord, Simulation  # noqa: F401
from testkit.simulator.simulate import simulate, write_truth  # noqa: F401
from testkit.simulator.workload import ColumnHint, SourceHints, Workload, load_workload  # noqa: F401
