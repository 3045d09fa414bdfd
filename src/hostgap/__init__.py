"""hostgap: where every millisecond of an LLM decode step goes."""

__version__ = "0.1.0"

SCHEMA_VERSION = 1
"""Version of every JSON document hostgap writes; bumped on incompatible change."""
