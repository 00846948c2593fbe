"""The embedded CPU runtime: a vLLM-compatible engine with a tiny real model, talking to LMCache.

Entry point: ``p2p-engine`` / ``python -m p2p_runtime.engine``; ``lmcache_adapter`` is the only module that
imports LMCache.
"""
