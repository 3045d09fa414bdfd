"""transformers as measure engines: ``hf``, hostgap's own greedy decode loop in process
(:mod:`.decode`), and ``hf-cb`` / ``hf-cb-async``, transformers' continuous batching
(:mod:`.batching`, driven through :mod:`.hooks`)."""
