"""The STEPS tables attribution reads: :mod:`.files` reads and writes them (harvested step
tables and generic request/step tables), :mod:`.layouts` builds the in-memory form from either
layout, and :mod:`.rows` is that form (:class:`~.rows.Steps`, :class:`~.rows.Requests`)."""
