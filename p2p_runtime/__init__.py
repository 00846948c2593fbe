"""The embedded CPU runtime: a vLLM-compatible engine with a tiny real model, talking to LMCache.

Engine modules, one concept each (entry point: ``p2p-engine`` / ``python -m p2p_runtime.engine``):

* ``config``          flags and validation (:class:`EngineConfig`)
* ``tokenizer``       byte-level tokenizer; ``chat_template`` renders messages to text
* ``model``           seeded transformer with chunk-aligned prefill over the paged cache
* ``kv_cache``        paged KV tensors in vLLM's NHD layout plus the block allocator
* ``lmcache_adapter`` the only module that imports LMCache (lookup, retrieve, store, reconnect)
* ``runner``          one request's model work: load prefix, prefill, store, decode
* ``scheduler``       the single worker thread: waiting queue, interleaved decode, abort
* ``timing``          optional GPU timing emulation
* ``metrics``         ``vllm:*`` and ``p2p_engine_*`` Prometheus series
* ``protocol``/``api`` OpenAI wire schemas and the FastAPI routes; ``core`` wires it all up
"""
