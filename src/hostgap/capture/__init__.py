"""Measuring a real workload: the measuring protocol (:mod:`.protocol`: warm-up, sweep,
differencing, validity, re-measurement) and the engines it drives (:mod:`.engines`:
transformers in process, vLLM). Imports torch, transformers and vLLM lazily."""
