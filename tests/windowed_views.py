"""Test data shared by tiers: windowed views (seed 002's KStream-KStream joins) pairing payments
with refunds of the same payment within [paid_at - 1 hour, paid_at + 2 days], 12 hours' grace,
as an outer join (both unmatched sides), a left join on the commit time, and an inner join."""

from __future__ import annotations

PIPELINE = """\
name: windowed
kafka: {topic_prefix: windowed}
sources:
  payments:
    kind: events
    primary_key: [id]
    columns: {id: bigint, account: bigint, amount: bigint, paid_at: timestamp}
  refunds:
    kind: events
    primary_key: [id]
    columns: {id: bigint, account: bigint, amount: bigint, refunded_at: timestamp}
views:
  refunds_outer:
    base: payments
    joins:
      - alias: refund
        table: refunds
        type: outer
        window:
          on: {account: account}
          before: 1 hour
          after: 2 days
          grace: 12 hours
          time: {payments: paid_at, refund: refunded_at}
    columns:
      payment_id: payments.id
      refund_id: refund.id
      account: payments.account
      paid: payments.amount
      refunded: refund.amount
      paid_at: payments.paid_at
      refunded_at: refund.refunded_at
"""

LEFT_VIEW = """\
  refunds_left:
    base: payments
    joins:
      - alias: refund
        table: refunds
        type: left
        window: {on: {account: account}, after: 1 days, grace: 1 hours}
    columns:
      payment_id: payments.id
      refund_id: refund.id
      refunded: refund.amount
"""
