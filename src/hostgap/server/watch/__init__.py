"""``hostgap watch``: a running server's decode telemetry and host-exposed share per interval,
from its own Prometheus metrics; gauges for Prometheus (docs/watch.md)."""
