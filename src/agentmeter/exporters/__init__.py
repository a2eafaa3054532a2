"""agentmeter.exporters: a stored run out of the store, for other tools.

- :mod:`agentmeter.exporters.table`: one row per trial try as CSV, JSON Lines or Parquet, in the
  columns the table importer (:mod:`agentmeter.importers.table`) reads by default, so an
  exported run imports back unchanged;
- :mod:`agentmeter.exporters.atif`: one trajectory per finished try in Harbor's ATIF.

Exporters read through the store's read API and raise
:class:`~agentmeter.importers.common.ImportFormatError` for a format problem, as importers do.
"""
