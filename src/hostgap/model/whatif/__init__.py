"""What-ifs: what a change to a cell (CUDA graphs, speculative decoding, FP8, TP, a faster
or busier CPU, overlapped scheduling, a megakernel) does to its predicted step.

:mod:`.registry` knows every what-if by name and builds the setup of a cell; :mod:`.paper` holds
the differencing paper's lens (graphs, spec, fp8, tp, host), :mod:`.cpu`, :mod:`.overlap` and
:mod:`.megakernel` the operators' what-ifs, :mod:`.change` what each returns, and
:mod:`.spec_residual` the speculative residual reconciled with the paper. A new what-if is a
function ``(Setup, kw) -> WhatIf`` in a module here, registered in ``registry.WHATIFS``.
"""
