"""An LLM judge's confidence in each answer (``--confidence verbal|logprobs``), read from its answer. Pure.

* ``verbal``: the prompt asks for one more output field, ``confidence`` (0-100, :func:`verbal_program`).
* ``logprobs``: the server returns the answer tokens' log-probabilities; the confidence is the probability of the
  tokens that spell the judge's answer field (:attr:`~personagap.judges.base.Judge.answer_field`): ``exp`` of the
  sum of their log-probabilities.

The rule for failures (:mod:`personagap.confidence`): a confidence is an extra field. When the answer parses but
its confidence does not (missing, not a number, outside 0-100, no log-probabilities returned, answer tokens not
found), the label stands and the confidence's failure is stored as ``confidence_error`` in the label's meta.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import dspy

from personagap.confidence import ERROR, PROBABILITY, SCALE, confidence_meta, probability_meta
from personagap.judges.base import VERBAL_SCALE, Judge, Program, verbal_program
from personagap.judges.lm import ConfidenceMode

TokenLogprob = tuple[str, float]

__all__ = ["TokenLogprob", "answer_probability", "confidence_entries", "parse_fields", "program_for",
           "token_logprobs"]


def program_for(judge: Judge, mode: ConfidenceMode) -> Program:
    """The program a run formats prompts from: the judge's, with a ``confidence`` field for ``verbal``.

    Raises:
        ValueError: ``logprobs`` for a judge without one answer field (its answer labels several items).
    """
    program = judge.program()
    if mode == "logprobs" and judge.answer_field is None:
        raise ValueError(f"judge {judge.name!r} gives one answer for several items: --confidence logprobs needs "
                         "one answer per item (use --confidence verbal or none)")
    return verbal_program(program) if mode == "verbal" else program


def parse_fields(adapter: dspy.Adapter, program: Program, base: Program, raw: str) -> tuple[dict[str, Any], bool]:
    """Split an answer into fields; when only the confidence field breaks the split, without it.

    Returns:
        The fields, and whether the confidence field was there.

    Raises:
        Exception: The adapter's error when the answer does not split even without the confidence field.
    """
    try:
        return dict(adapter.parse(program.signature, raw)), True
    except Exception:
        if program.signature is base.signature:
            raise
        return dict(adapter.parse(base.signature, raw)), False


def token_logprobs(choice: Any) -> list[TokenLogprob] | None:
    """The (token, log-probability) list of an OpenAI-shaped choice, or None when the server returned none."""
    logprobs = _get(choice, "logprobs")
    content = _get(logprobs, "content") if logprobs is not None else None
    if not content:
        return None
    out = []
    for entry in content:
        token, logprob = _get(entry, "token"), _get(entry, "logprob")
        if not isinstance(token, str) or not isinstance(logprob, int | float):
            return None
        out.append((token, float(logprob)))
    return out


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def answer_probability(raw: str, field: str, answer: object,
                       tokens: Sequence[TokenLogprob] | None) -> tuple[float | None, str]:
    """The probability of the tokens spelling ``answer``: its first occurrence after the field's last mention.

    Args:
        raw: The answer text (the tokens' concatenation).
        field: The answer field's name (JSON key or chat section name), so a reason quoting the answer is skipped.
        answer: The parsed answer field's value.
        tokens: (token, log-probability) pairs, in order.

    Returns:
        ``(probability, "")`` or ``(None, why)``.
    """
    if tokens is None:
        return None, "missing: the server returned no log-probabilities"
    text = "".join(t for t, _ in tokens)
    if text != raw:
        return None, "invalid: the log-probabilities' tokens do not spell the answer text"
    value = str(answer).strip()
    start = raw.find(value, max(raw.rfind(field), 0)) if value else -1
    if start < 0:
        return None, f"missing: answer {value[:20]!r} not found in the answer text"
    end, pos, total = start + len(value), 0, 0.0
    for token, logprob in tokens:
        if pos < end and pos + len(token) > start:  # the token overlaps the answer's characters
            total += logprob
        pos += len(token)
    return math.exp(total), ""


def confidence_entries(mode: ConfidenceMode, judge: Judge, fields: Mapping[str, Any], had_field: bool, raw: str,
                       tokens: Sequence[TokenLogprob] | None) -> dict[str, Any]:
    """The ``meta`` entries of one parsed answer's confidence (empty for ``none``)."""
    if mode == "verbal":
        if not had_field:
            return {SCALE: VERBAL_SCALE, ERROR: "missing: the answer has no confidence field"}
        return confidence_meta(fields.get("confidence"), VERBAL_SCALE)
    if mode == "logprobs":
        assert judge.answer_field is not None  # program_for refuses such judges before any call
        p, why = answer_probability(raw, judge.answer_field, fields.get(judge.answer_field), tokens)
        return probability_meta(p) if p is not None else {SCALE: PROBABILITY, ERROR: why}
    return {}
