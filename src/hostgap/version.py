"""hostgap's version and the version of the documents it writes: the ground floor every package
may read, so that nothing below the API imports the package root (``hostgap/__init__.py``, the
lazy API façade) for two constants."""

__version__ = "0.1.0"
"""The one version source: ``pyproject.toml`` reads it (``[tool.setuptools.dynamic]``)."""

SCHEMA_VERSION = 1
"""Version of every JSON document hostgap writes; bumped on incompatible change."""
