"""Test data shared by tiers: a view joining two global tables on key expressions (seed 004), one
on the base (`st`, joins[1], given by the test) and one on a joined alias (`land`, via customers)."""

from __future__ import annotations

_BODY = """\
sources:
  customers:
    primary_key: [id]
    columns: {id: bigint, name: string, country: string}
  orders:
    primary_key: [id]
    columns: {id: bigint, customer_id: bigint, status: string}
    foreign_keys:
      customer: {columns: [customer_id], references: customers}
  statuses:
    kind: global
    primary_key: [code]
    columns: {code: string, label: string}
  countries:
    kind: global
    primary_key: [iso]
    columns: {iso: string, region: string}
views:
  orders_enriched:
    base: orders
    joins:
      - {alias: c, via: orders.customer, type: left}
      - @STATUS_JOIN@
      - {alias: land, table: countries, key: "upper(c.country)", type: inner}
    columns:
      order_id: orders.id
      status: orders.status
      status_label: st.label
      customer_name: c.name
      region: land.region
"""


def global_pipeline(status_join: str, header: str = "name: glob\nkafka: {topic_prefix: glob}\n") -> str:
    """The pipeline file's text: `header` (name, kafka, tables, options), the sources and the view."""
    return header + _BODY.replace("@STATUS_JOIN@", status_join)
