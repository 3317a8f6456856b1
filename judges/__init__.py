"""The only layer that calls an LLM."""
