"""hostgap's own error type: a user-facing problem with one input."""


class HostgapError(Exception):
    """A problem the user can fix, reported as one line and exit status 2.

    ``source`` names the input (a file, a preset, an option); the message says what is wrong.
    """

    def __init__(self, source: str, problem: str):
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem
