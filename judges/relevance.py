"""LLM judges for stage 2 (relevance selection)."""
