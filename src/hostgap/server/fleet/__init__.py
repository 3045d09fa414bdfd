"""A fleet through its Prometheus: calibrations per class, recording rules, the fleet view."""
