"""The embedded CPU runtime: a vLLM-compatible engine with a tiny real model, talking to LMCache."""
