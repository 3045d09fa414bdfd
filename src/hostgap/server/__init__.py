"""Talking to running inference servers (vLLM, SGLang): :mod:`.attach` profiles one for a number
of steps and hands the trace files to the same analysis as ``hostgap analyze``; :mod:`.watch`
turns its Prometheus metrics into a per-interval estimate, without a profiler. The two share
the HTTP helpers (:mod:`.httpcall`) and the metrics parser (:mod:`.metrics`)."""
