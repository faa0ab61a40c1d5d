"""Test data shared by tiers: as-of views (seed 001) over versioned customers and orders, a global
`methods` table, and payments as events: one on the commit time (left joins and a global key
expression), one on a declared time (`as_of: paid_at`, inner joins)."""

from __future__ import annotations

PIPELINE = """\
name: asof
kafka: {topic_prefix: asof}
sources:
  customers:
    primary_key: [id]
    columns: {id: bigint, segment: string}
  orders:
    primary_key: [id]
    columns: {id: bigint, customer_id: bigint, status: string}
    foreign_keys:
      customer: {columns: [customer_id], references: customers}
  methods:
    kind: global
    primary_key: [code]
    columns: {code: string, label: string}
  payments:
    kind: events
    primary_key: [id]
    columns: {id: bigint, order_id: bigint, method: string, amount: bigint, paid_at: timestamp}
    foreign_keys:
      order: {columns: [order_id], references: orders}
views:
  payments_as_of:
    base: payments
    joins:
      - {alias: ord, via: payments.order, type: left}
      - {alias: customer, via: ord.customer, type: left}
      - {alias: m, table: methods, key: "upper(payments.method)", type: left}
    columns:
      payment_id: payments.id
      amount: payments.amount
      order_status: ord.status
      customer_id: ord.customer_id
      segment: customer.segment
      method: m.label
  payments_paid_inner:
    base: payments
    as_of: paid_at
    joins:
      - {alias: ord, via: payments.order, type: inner}
      - {alias: customer, via: ord.customer, type: inner}
    columns:
      payment_id: payments.id
      order_status: ord.status
      segment: customer.segment
"""
