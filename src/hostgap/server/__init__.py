"""Talking to running inference servers (vLLM, SGLang): detect the engine, drive load, profile
for a number of steps and hand the trace files to the same analysis as ``hostgap analyze``.

Layer: above :mod:`hostgap.ranks`; nothing below imports this package.
"""
