"""The measuring protocol (docs/measure.md): one configuration run against any engine through
the :class:`~.engine.Engine` interface, untraced and traced runs over a sweep of token counts,
re-measured until the checks pass or the budget is spent, reduced to a run's results."""
