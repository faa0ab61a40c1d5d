"""Verify, the audit users run: gold against the SQL join recomputed over silver or a real PostgreSQL.

`oracle` renders a view to SQL; `views` compares gold with it; `postgres` compares with the source database."""
