"""agentmeter.store: the results store (SQLite or PostgreSQL through SQLAlchemy Core) and the
one read API over it.

- :mod:`~agentmeter.store.db`: :class:`~agentmeter.store.db.Store`, opening and every write (its
  read methods are shorthands for the single-record reads of ``queries``);
- :mod:`~agentmeter.store.queries`: the read API: single records, and the reads over runs for
  scoring, summaries, exports, repricing;
- :mod:`~agentmeter.store.browse`: paged reads for the viewer and the HTML report;
- :mod:`~agentmeter.store.expressions`: the read rules as SQL (one home each);
- :mod:`~agentmeter.store.schema`, :mod:`~agentmeter.store.migrations`: tables and their DDL.
"""
