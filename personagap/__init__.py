"""PersonaGap: which stage of an LLM personalization pipeline fails, and do LLM judges agree with humans."""

__version__ = "0.1.0"
