"""Which LLM a judge calls and what it costs: the settings (:class:`LMConfig`), token prices, response formats.

Shared by the runner, the cache-key scheme (:mod:`personagap.judges.cache`) and the optimiser, so none of them
imports another only for these.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Literal

ConfidenceMode = Literal["none", "verbal", "logprobs"]
"""How a judge's confidence is captured: not at all; a verbalised ``confidence`` output field (0-100) in the
prompt; or the probability of the answer tokens from the server's log-probabilities."""
CONFIDENCE_MODES: tuple[ConfidenceMode, ...] = ("none", "verbal", "logprobs")

@dataclass(frozen=True)
class LMConfig:
    """Which LLM to call and how.

    Attributes:
        model: Any LiteLLM/DSPy model string, e.g. ``openai/gpt-4o-mini`` or
            ``openai/<served-name>`` with ``api_base`` for a local server.
        api_base: Base URL of an OpenAI-compatible server (``http://127.0.0.1:8000/v1``).
        api_key_env: Environment variable holding the key. Default: the provider's
            usual variable (``OPENAI_API_KEY`` for ``openai/``); with ``api_base`` and no
            key set, a placeholder is sent (local servers ignore it).
        temperature: Sampling temperature (0 for reproducible judgments).
        max_tokens: Answer length cap.
        timeout: Seconds per call before it counts as a timeout.
        adapter: DSPy adapter that formats prompts and parses answers ('json' or 'chat').
        structured: Send the judge's JSON schema as ``response_format`` (constrained decoding; what makes
            small local models answer parseably): 'json_schema' in OpenAI's shape (OpenAI, vLLM),
            'json_object' as ``{"type": "json_object", "schema": ...}`` (llama.cpp's server), or 'off'.
        confidence: :data:`ConfidenceMode`. Part of the cache key like every setting: a verbal confidence changes
            the prompt, and log-probabilities are only in answers that asked for them.
    """

    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    temperature: float = 0.0
    max_tokens: int = 512
    timeout: float = 60.0
    adapter: Literal["json", "chat"] = "json"
    structured: Literal["off", "json_schema", "json_object"] = "off"
    confidence: ConfidenceMode = "none"

    def public(self) -> dict[str, Any]:
        """The settings safe to store (no key: only the name of its variable)."""
        return asdict(self)

    def api_key(self) -> str | None:
        """Read the key from the environment (never stored)."""
        var = self.api_key_env or _default_key_var(self.model)
        key = os.environ.get(var) if var else None
        if key:
            return key
        return "not-needed" if self.api_base else None


def _default_key_var(model: str) -> str | None:
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
            "together_ai": "TOGETHERAI_API_KEY", "groq": "GROQ_API_KEY", "mistral": "MISTRAL_API_KEY"}.get(provider)


def response_format_for(mode: str, wanted: dict[str, Any]) -> dict[str, Any]:
    """Spell a judge's ``{"type": "json_schema", "name", "schema"}`` the way the server understands it."""
    if mode == "json_object":
        return {"type": "json_object", "schema": wanted["schema"]}
    return {"type": "json_schema", "json_schema": {"name": wanted.get("name", "verdict"), "schema": wanted["schema"]}}


@dataclass(frozen=True)
class TokenPrices:
    """USD per prompt and per completion token."""

    prompt: float
    completion: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The estimated cost of one call."""
        return prompt_tokens * self.prompt + completion_tokens * self.completion


def token_prices(model: str) -> TokenPrices | None:
    """Look up a model's token prices in the price map DSPy ships (LiteLLM's), once per run.

    Providers report tokens, not money: the cost in a run summary is this estimate (tokens x list
    price; no cached-token discounts), and None for a model the map does not list -- a local server's
    served name, say -- rather than a made-up zero.

    Args:
        model: The LiteLLM/DSPy model string, e.g. ``openai/gpt-4o-mini``.
    """
    provider, _, name = model.partition("/") if "/" in model else ("openai", "", model)
    try:
        from dspy.clients.model_metadata import model_info

        info = model_info(provider, name)
    except Exception:  # advisory only: an unreadable map means "cost not known", never a failed run
        return None
    prompt, completion = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if not isinstance(prompt, int | float) or not isinstance(completion, int | float):
        return None
    return TokenPrices(float(prompt), float(completion))
