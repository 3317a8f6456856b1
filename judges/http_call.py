"""One HTTP attempt of an LLM call (:func:`one_call`) and how its faults are classed, for the runner.

Kept apart from :mod:`personagap.judges.runner` (which decides what to retry and stores answers): here the
provider's exceptions become :class:`Retryable` (retry with backoff) or :class:`Fatal` (record the failure).
"""

from __future__ import annotations

import asyncio
from typing import Any

import dspy
from dspy.utils.exceptions import LMError, LMRateLimitError, LMServerError, LMTransportError

from personagap.judges.confidence import TokenLogprob, token_logprobs
from personagap.judges.lm import TokenPrices


class Retryable(Exception):
    """A transient fault (429, 5xx, timeout, dropped connection): the runner retries with backoff."""

    def __init__(self, kind: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind, self.retry_after = kind, retry_after


class Fatal(Exception):
    """A request the provider rejected for good (bad request, auth, unknown model)."""


async def one_call(client: dspy.LM, messages: list[dict[str, Any]], extra: dict[str, Any],
                   timeout: float, prices: TokenPrices | None
                   ) -> tuple[str, dict[str, Any] | None, list[TokenLogprob] | None]:
    """One HTTP attempt. Returns (text, usage, token log-probabilities if sent) or raises Retryable / Fatal."""
    try:
        # aforward returns the OpenAI-shaped response, whose usage we need per call.
        response = await asyncio.wait_for(client.aforward(messages=messages, **extra), timeout=timeout + 5)
    except TimeoutError as exc:
        raise Retryable("timeout", f"no answer within {timeout:.0f}s") from exc
    except LMRateLimitError as exc:
        raise Retryable("rate_limited", "HTTP 429", getattr(exc, "retry_after", None)) from exc
    except LMServerError as exc:
        raise Retryable("server_error", first_line(exc)) from exc
    except LMTransportError as exc:
        kind = "timeout" if "timed out" in str(exc) else "transport"
        raise Retryable(kind, first_line(exc)) from exc
    except LMError as exc:
        raise Fatal(first_line(exc)) from exc
    choice = response.choices[0]
    text = getattr(choice.message, "content", None) or ""
    usage = getattr(response, "usage", None)
    usage_dict = None
    if usage is not None:
        prompt_tokens = _get(usage, "prompt_tokens")
        completion_tokens = _get(usage, "completion_tokens")
        usage_dict = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "cost": prices.cost(prompt_tokens, completion_tokens) if prices else None}
    return text, usage_dict, token_logprobs(choice)


def _get(usage: Any, name: str) -> int:
    value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
    return int(value or 0)



def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
