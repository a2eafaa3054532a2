"""The local web viewer over a store (``agentmeter view``): the report's pages, a runs list,
live updates while a run is in progress, SQL paging for large stores."""

from agentmeter.report.viewer.app import RunningViewer, Viewer, serve, start_in_thread

__all__ = ["RunningViewer", "Viewer", "serve", "start_in_thread"]
