"""The report's figures, matplotlib rendered to inline SVG, each with a caption: :mod:`.canvas`
(the :class:`~.canvas.Figure`, colours, labels and drawing helpers every figure shares),
:mod:`.stepwise` (per step: the split, TaxBreak, differencing, processes, the loop), :mod:`.hotspots`
(kernels and the host's time), :mod:`.across` (across steps and inputs: idle gaps, the regime
map, a step's timeline). A new figure goes in the module of its kind, called from
``report/html.py``."""
