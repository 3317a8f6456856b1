"""LLM judges for the response stage."""
