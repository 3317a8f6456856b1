"""Keep DSPy's per-call CPU small, so a run with many calls in flight is bound by the provider, not by us.

The runner keeps ``concurrency`` calls in flight on one event loop. Every microsecond of Python work per call
is done while holding the interpreter lock, so once the per-call CPU approaches ``latency / concurrency``
(6 ms for 200 ms answers at 32 in flight), answers wait for the loop and the run stretches. Profiling
``benchmarks/judge_throughput.py`` (DSPy 3.4) found two costs that repeat identical work on every call:

* **Pricing metadata lookup.** After each answer DSPy estimates its cost from LiteLLM's model map. For a
  model name the map does not know -- every local server's served name, e.g. ``openai/smollm2`` -- the
  lookup scans the whole map, twice per call (~1.7 ms of CPU). The map is loaded once and never changes
  afterwards, so the answer for a (provider, model, namespaces) key never changes either:
  :func:`memoize_pricing_lookup` caches it. Known models are unaffected (still a dict hit).
* **The system message.** DSPy's adapters rebuild it from the signature on every call, though it depends
  only on the signature: :func:`adapter_for` returns adapters that build it once per signature.

Measured on 2 cores (3,973 calls, 200 ms latency, 32 in flight): client CPU 7.3 -> 4.3 ms per call, wall
time over ideal 1.65 -> 1.11. The prompts and parsed answers are unchanged (tests compare them with
DSPy's own).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any, Literal

import dspy

_patch_lock = threading.Lock()


def memoize_pricing_lookup() -> bool:
    """Cache DSPy's pricing-metadata lookup per (provider, model, namespaces) for this process.

    Idempotent and thread-safe. Callers get a deep copy of the cached entry, as they got a fresh copy
    from DSPy's own function. If this DSPy has no such lookup where expected, nothing is changed.

    Returns:
        True when the cached lookup is in place.
    """
    try:
        from dspy.clients import costs
    except ImportError:  # a DSPy without the module: nothing to speed up
        return False
    with _patch_lock:
        current = getattr(costs, "model_info", None)
        if current is None:
            return False
        if getattr(current, "_personagap_memoized", False):
            return True
        costs.model_info = _memoized(current)
        return True


def _memoized(lookup: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    cache: dict[tuple[Any, ...], dict[str, Any]] = {}
    lock = threading.Lock()

    def model_info(provider: str, model: str, *, namespaces: tuple[str, ...] | None = None) -> dict[str, Any]:
        key = (provider, model, None if namespaces is None else tuple(namespaces))
        with lock:
            found = cache.get(key)
        if found is None:
            found = lookup(provider, model, namespaces=namespaces)
            with lock:
                cache[key] = found
        return copy.deepcopy(found)

    model_info._personagap_memoized = True  # type: ignore[attr-defined]
    model_info.__wrapped__ = lookup  # type: ignore[attr-defined]
    return model_info


def adapter_for(kind: Literal["json", "chat"]) -> dspy.Adapter:
    """A fresh DSPy adapter of the given kind whose system message is built once per signature.

    The memo sits on the instance, not in a subclass: DSPy wraps ``format``/``parse`` of every Adapter
    subclass in its callback hooks again, and an instance attribute changes nothing else.
    """
    adapter = dspy.JSONAdapter() if kind == "json" else dspy.ChatAdapter()
    build = adapter.format_system_message
    memo: dict[Any, str] = {}

    def format_system_message(signature: Any) -> str:
        if signature not in memo:
            memo[signature] = build(signature)
        return memo[signature]

    adapter.format_system_message = format_system_message
    return adapter
