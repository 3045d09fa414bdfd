"""Examples per property test: the suite's own budget, or ``HOSTGAP_PROPERTY_EXAMPLES`` when
``bench/properties.py`` runs the property tests at a large one (>= 10,000 each).

Property tests write ``@settings(**examples(60), deadline=None)``. Under the large budget the
example database is off as well, so every run draws fresh examples from the seed it is given.
"""

from __future__ import annotations

import os

LARGE = os.environ.get("HOSTGAP_PROPERTY_EXAMPLES")


def examples(default: int) -> dict:
    """Hypothesis settings for ``default`` examples, or for the large budget when it is set."""
    if LARGE is None:
        return {"max_examples": default}
    return {"max_examples": int(LARGE), "database": None}
