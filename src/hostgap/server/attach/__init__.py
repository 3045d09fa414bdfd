"""``hostgap attach``: profile a running server for N engine steps through its own profiler
routes, optionally under a known load, and analyse the trace it writes (docs/attach.md)."""
