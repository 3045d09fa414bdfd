"""The levers (``hostgap advise``, docs/advise.md): what each change to a decode step would save,
calibrated on one input. :mod:`.baseline` reads the input's baseline from the documents hostgap
writes (a trace's steps, a measured or attached run's results), :mod:`.arithmetic` holds the
host-side levers' arithmetic (graphs, async, cpu, fusion, megakernel) and the ranking,
:mod:`.device` the levers that change the device's work (batch, fp8, tp, spec) through the
what-ifs of :mod:`hostgap.model.whatif`, :mod:`.ranked` every lever of one input in words, and
:mod:`.validation` the levers held against published figures."""
