"""The metered LM: every optimiser call counted, capped by the budget and answered once (the one answer cache).

Requests are keyed by the runner's scheme (:func:`~personagap.judges.cache.prompt_identity`), and answers are
kept in the database's ``judge_cache``, so ``judge`` and ``optimize`` never pay twice for one request.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dspy
import litellm
from dspy.utils.exceptions import AdapterParseError

from personagap.judges.base import Judge, JudgeTask
from personagap.judges.cache import answer_key, prompt_identity
from personagap.judges.lm import LMConfig, TokenPrices, response_format_for
from personagap.judges.optimize.data import BudgetExhausted, base_name
from personagap.store import now, opened, upsert
from personagap.store.judge_answers import program_cache_rows


@dataclass
class Meter:
    """Calls, cache hits, tokens and cost of one optimisation run, shared by every copy of the LM.

    ``budget`` caps the calls made while ``phase == 'optimise'``; evaluation phases are capped by the plan.
    """

    budget: int | None
    prices: TokenPrices | None
    cache: dict[str, dict[str, Any]] = field(default_factory=dict)
    new_entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    phase: str = "optimise"
    calls: dict[str, int] = field(default_factory=dict)
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    exhausted: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __deepcopy__(self, memo: dict[int, Any]) -> Meter:
        return self  # DSPy deep-copies LMs (lm.copy, program.deepcopy): every copy keeps counting here

    def reserve(self) -> None:
        """Count one HTTP call about to be sent, or raise :class:`BudgetExhausted`."""
        with self.lock:
            used = self.calls.get(self.phase, 0)
            if self.phase == "optimise" and self.budget is not None and used >= self.budget:
                self.exhausted = True
                raise BudgetExhausted(f"optimiser budget of {self.budget} LLM calls used up")
            self.calls[self.phase] = used + 1

    def lookup(self, key: str | None) -> dict[str, Any] | None:
        """The cached answer under ``key`` (counted as a cache hit), or None."""
        if key is None:
            return None
        with self.lock:
            hit = self.cache.get(key)
            if hit is not None:
                self.cache_hits += 1
        return hit

    def keep(self, key: str, entry: dict[str, Any]) -> None:
        """Cache a fresh answer for this run, and for the store unless :meth:`unusable` drops it."""
        with self.lock:
            self.cache[key] = entry
            self.new_entries[key] = entry

    def unusable(self, key: str) -> None:
        """An answer the judge could not read: never stored, so a later run asks again (as the runner does).

        It stays answerable within this run: the same request at the same settings would get it again.
        """
        with self.lock:
            self.new_entries.pop(key, None)

    def record(self, usage: Mapping[str, Any] | None) -> None:
        """Add one answer's token usage (and its estimated cost when the model's prices are known)."""
        if not usage:
            return
        p, c = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        with self.lock:
            self.prompt_tokens += p
            self.completion_tokens += c
            if self.prices is not None:
                self.cost = (self.cost or 0.0) + self.prices.cost(p, c)


class MeteredLM(dspy.BaseLM):  # type: ignore[misc]  # dspy ships no type information
    """A DSPy LM that sends each distinct request once, counts it, and refuses calls beyond the budget.

    Repeats (same model, messages and request parameters) are answered from :attr:`Meter.cache`; only the
    rest reach the provider, through a plain ``dspy.LM`` with DSPy's own cache off so that every call it
    makes is a real HTTP call.
    """

    def __init__(self, lm: LMConfig, meter: Meter) -> None:
        super().__init__(model=lm.model, cache=False, temperature=lm.temperature, max_tokens=lm.max_tokens)
        self.config = lm
        self.meter = meter
        self.inner = dspy.LM(lm.model, api_base=lm.api_base, api_key=lm.api_key(), cache=False, num_retries=3,
                             timeout=lm.timeout, temperature=lm.temperature, max_tokens=lm.max_tokens)

    def forward(self, prompt: str | None = None, messages: list[dict[str, Any]] | None = None,
                **kwargs: Any) -> Any:
        """One chat completion: from the cache, or counted and sent.

        Only calls that carry an :data:`ANSWER_KEY_ARG` (every call made through :func:`judge_adapter`) are
        cached: the key is the runner's (:func:`~personagap.judges.runner.prompt_identity`), so answers a
        ``judge`` run stored are reused here and the other way round.
        """
        key = kwargs.pop(ANSWER_KEY_ARG, None)
        request = {**self.kwargs, **kwargs}
        hit = self.meter.lookup(key)
        if hit is not None:
            return _response(hit["raw"], self.model)
        self.meter.reserve()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # DSPy's notice about messages=
            response = self.inner.forward(messages=messages or [{"role": "user", "content": prompt}],
                                          **{k: v for k, v in request.items()
                                             if k not in ("temperature", "max_tokens")},
                                          temperature=request.get("temperature"),
                                          max_tokens=request.get("max_tokens"))
        text = getattr(response.choices[0].message, "content", None) or ""
        usage = _usage(getattr(response, "usage", None))
        self.meter.record(usage)
        if key is not None:
            self.meter.keep(key, {"raw": text, "usage": usage})
        return response


ANSWER_KEY_ARG = "personagap_answer_key"
"""The LM call argument by which :func:`judge_adapter` hands :class:`MeteredLM` the request's cache key
(removed before the request is sent)."""


def _usage(usage: Any) -> dict[str, int] | None:
    if usage is None:
        return None
    def get(name: str) -> int:
        value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
        return int(value or 0)

    return {"prompt_tokens": get("prompt_tokens"), "completion_tokens": get("completion_tokens")}


def _response(text: str, model: str) -> Any:
    """An OpenAI-shaped response for a cached answer (no usage: it cost nothing this time)."""
    return litellm.ModelResponse(choices=[{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": text}}],
                                 usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}, model=model)


def load_cache(db: str | Path, judge: Judge, model: str) -> dict[str, dict[str, Any]]:
    """Stored answers of this judge (and its programs) and model, by the runner's cache key."""
    name = base_name(judge)
    with opened(db, read_only=True) as con:
        rows = program_cache_rows(con, model, name)
    return {k: {"raw": r, "usage": None} for k, r in rows}


def save_cache(db: str | Path, judge: Judge, model: str, entries: Mapping[str, Mapping[str, Any]]) -> None:
    """Store new answers in ``judge_cache`` (one transaction) so no later run, judge or optimize, pays twice."""
    if not entries:
        return
    rows = [{"key": k, "judge": base_name(judge), "judge_version": judge.version, "model": model, "label": None,
             "raw": e["raw"], "reason": None, "error": None, "usage": e.get("usage"), "created_at": now()}
            for k, e in entries.items()]
    with opened(db) as con:
        upsert(con, "judge_cache", rows)


def judge_adapter(judge: Judge, lm: LMConfig) -> dspy.Adapter:
    """The adapter the runner uses (same prompt format), sending the judge's schema when ``lm.structured``.

    Only calls of the judge's own signature get the schema; an optimiser's other calls (instruction
    proposals) go out plain. No JSON fallback: one call per prediction, as in the runner.
    """
    base: type[dspy.Adapter] = dspy.JSONAdapter if lm.adapter == "json" else dspy.ChatAdapter
    wanted = judge.response_format()
    outputs = set(judge.signature.output_fields)

    class _JudgeAdapter(base):  # type: ignore[misc,valid-type]
        def _with_format(self, signature: Any, lm_kwargs: dict[str, Any]) -> dict[str, Any]:
            if lm.structured != "off" and wanted is not None and set(signature.output_fields) == outputs:
                return {**lm_kwargs, "response_format": response_format_for(lm.structured, wanted)}
            return lm_kwargs

        def __call__(self, model: Any, lm_kwargs: dict[str, Any], signature: Any, demos: Any, inputs: Any) -> Any:
            kwargs = self._with_format(signature, lm_kwargs)
            key = _answer_key(lm, signature, demos, inputs, kwargs)
            ours = set(signature.output_fields) == outputs
            try:
                found = super().__call__(model, {**kwargs, ANSWER_KEY_ARG: key}, signature, demos, inputs)
            except AdapterParseError:
                if not ours:
                    raise
                # An answer the adapter cannot split (PRISM's judges wrote a bare "[") is the judge's failure:
                # every output field empty, which its parser records as unparseable and the optimiser's metric
                # scores 0. Raised instead, it would stop BootstrapFewShot (max_errors=1) and the whole run.
                found = [dict.fromkeys(signature.output_fields)]
            if ours and not _readable(judge, found, inputs):
                _meter_of(model).unusable(key)  # the runner's rule: an answer the judge cannot read is not stored
            return found

        def _prepare_response_format(self, model: Any, lm_kwargs: dict[str, Any], signature: Any) -> None:
            pass  # the request carries exactly what _with_format chose

    return _JudgeAdapter() if lm.adapter == "json" else _JudgeAdapter(use_json_adapter_fallback=False)


def _answer_key(lm: LMConfig, signature: Any, demos: Sequence[Mapping[str, Any]], inputs: Mapping[str, Any],
                lm_kwargs: Mapping[str, Any]) -> str:
    """The runner's cache key of one call, with the settings this call really sends.

    An optimiser may change the temperature or add arguments (a rollout id); they are in the key
    (:func:`~personagap.judges.runner.prompt_identity`), so such a call never reuses a plain call's answer.
    """
    temperature, max_tokens = lm_kwargs.get("temperature"), lm_kwargs.get("max_tokens")
    settings = replace(lm, temperature=lm.temperature if temperature is None else temperature,
                       max_tokens=lm.max_tokens if max_tokens is None else max_tokens)
    extra = {k: v for k, v in lm_kwargs.items() if k not in ("temperature", "max_tokens")}
    return answer_key(prompt_identity(settings, signature, demos, extra), inputs)


def _readable(judge: Judge, outputs: Sequence[Mapping[str, Any]], inputs: Mapping[str, Any]) -> bool:
    """Whether the judge's parser reads a label from every answer (what makes the runner cache one)."""
    probe = JudgeTask(key="", targets=("item",), inputs=dict(inputs))
    return all(judge.parse(o, probe)["item"].label is not None for o in outputs)


def _meter_of(model: Any) -> Meter:
    meter: Meter = model.meter
    return meter
