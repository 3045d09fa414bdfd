"""The engines the measuring protocol drives, each behind :class:`hostgap.capture.protocol.engine.Engine`:
transformers in process (:mod:`.hf`) and vLLM's V1 engine (:mod:`.vllm` and the modules it
uses); the live harvest of co-batched steps on vLLM (:mod:`.harvest`)."""
