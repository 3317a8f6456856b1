"""PersonaGap: which stage of an LLM personalization pipeline fails, and do LLM judges agree with humans."""

import os

# LiteLLM (under DSPy) downloads a model-cost map on import unless told to use its bundled copy; a hanging
# DNS lookup would stall every command on a machine without network. Set before anything imports dspy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"
