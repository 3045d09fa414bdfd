"""hostgap's own error type: a user-facing problem with one input; the exit statuses."""

EXIT_BAD_INPUT = 2
"""A problem with an input (:class:`HostgapError`)."""
EXIT_INVALID = 3
"""A measurement whose checks failed, or an engine or server that failed: no result."""


class HostgapError(Exception):
    """A problem the user can fix, reported as one line and exit status 2.

    ``source`` names the input (a file, a preset, an option); the message says what is wrong.
    """

    def __init__(self, source: str, problem: str):
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem
