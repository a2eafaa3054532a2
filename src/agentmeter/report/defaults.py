"""Report defaults the command line shows in its help (importable without the report's
dependencies)."""

#: bootstrap resamples of the leaderboard's confidence intervals (``report --resamples``)
DEFAULT_RESAMPLES = 1000
