"""Fitting step models: :mod:`.measured` (measured cells in, a fitted step model out, and
back), :mod:`.calibrate` (the default vLLM host term, fitted on the paper's published cells in
``model/paper_cells.json``) and :mod:`.sources` (``hostgap fit`` from its sources: runs, vidur's
kernel and all-reduce times, the published cells)."""
