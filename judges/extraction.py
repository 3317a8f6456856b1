"""LLM judges for the extraction stage."""
