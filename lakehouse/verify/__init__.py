"""Verify, the audit users run: gold against the SQL join recomputed over silver or a real PostgreSQL.

`oracle` is the view as a SQL join; `views` compares gold with it; `postgres` compares with the
source database; `truth` reads the truth files a simulation leaves."""
