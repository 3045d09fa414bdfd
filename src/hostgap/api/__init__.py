"""hostgap's Python API (the functions ``import hostgap`` exposes; docs/api.md)."""
