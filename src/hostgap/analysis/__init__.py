"""Trace analysis as the commands and the library ask for it: one trace (loaded, linked, its step
anatomy and GPU overview) and trace sets of several ranks; tables derived from a trace's steps
(the harvest table, vLLM's per-process split)."""
