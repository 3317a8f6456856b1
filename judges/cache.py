"""The one cache-key scheme of LLM answers (:func:`prompt_identity`, :func:`answer_key`).

``judge`` runs (:mod:`personagap.judges.runner`) and ``optimize`` (:mod:`personagap.judges.optimize`) both key the
answers they store in ``judge_cache`` with it, so an answer one of them paid for is reused by the other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import dspy

from personagap.judges.base import Judge, Program
from personagap.judges.lm import LMConfig, response_format_for
from personagap.judges.lm_overhead import adapter_for

ANSWER_NEUTRAL_SETTINGS = frozenset({"api_key_env", "timeout"})
""":class:`LMConfig` fields that cannot change an answer (which variable holds the key; how long we wait).
Every other field -- and any field added later -- is part of the cache key."""


def lm_identity(lm: LMConfig) -> dict[str, Any]:
    """The LM settings that can change an answer: all but :data:`ANSWER_NEUTRAL_SETTINGS`, server URL normalised.

    The one rule for which settings belong in a cache key; code with its own request cache (the optimiser's)
    adds this to its key so that, e.g., the same model name on another server is never served from the cache.
    """
    settings = {k: v for k, v in lm.public().items() if k not in ANSWER_NEUTRAL_SETTINGS}
    settings["api_base"] = (lm.api_base or "").rstrip("/") or None  # '.../v1/' and '.../v1' are one server
    return settings


def request_extra(judge: Judge, lm: LMConfig) -> dict[str, Any]:
    """Request arguments beyond the messages and the LM settings (the ``response_format`` when structured)."""
    wanted = judge.response_format()
    if lm.structured == "off" or wanted is None:
        return {}
    return {"response_format": response_format_for(lm.structured, wanted)}


def call_identity(judge: Judge, lm: LMConfig, program: Program | None = None) -> str:
    """Hash of everything but the task's inputs that can change an answer: :func:`prompt_identity` of a judge.

    Args:
        judge: The judge (its ``response_format`` is part of the request when ``lm.structured``).
        lm: The model settings.
        program: What prompts are built from; default ``judge.program()``. An optimised program (other
            instructions or demos) gets another identity, so its answers never mix with the plain judge's.

    Returns:
        A hex digest; combine it with a task's inputs with :func:`answer_key`.
    """
    program = program or judge.program()
    return prompt_identity(lm, program.signature, program.demos, request_extra(judge, lm))


def prompt_identity(lm: LMConfig, signature: type[dspy.Signature], demos: Sequence[Mapping[str, Any]],
                    request: Mapping[str, Any]) -> str:
    """The one cache-key scheme: a hash of everything but the inputs that shapes the request sent.

    ``judge`` (per run) and ``optimize`` (per call, from its adapter) both key answers with it, so an answer
    one paid for is reused by the other for the same request. Covers every LM setting except
    :data:`ANSWER_NEUTRAL_SETTINGS` (model, server ``api_base``, temperature, max_tokens, adapter, structured, ...);
    the extra request arguments (``response_format``, and any an optimiser adds, e.g. a rollout id); and what the
    adapter renders the prompt from: the system message (instructions, fields), the fields themselves and the
    demos' signature fields (the only part of a demo the prompt shows). Never the API key, and never the judge's
    name: two judges sending the same request get the same answer, and each re-parses it with its own parser.

    Args:
        lm: The model settings (with any per-call temperature or max_tokens already applied).
        signature: The DSPy signature the prompt is formatted from.
        demos: Few-shot demos shown before the task (plain dicts or ``dspy.Example``).
        request: Request arguments beyond the messages and the LM settings (None values are not sent).

    Returns:
        A hex digest; combine it with a task's inputs with :func:`answer_key`.
    """
    fields = {name: [role, str(info.annotation), info.json_schema_extra]
              for role, group in (("in", signature.input_fields), ("out", signature.output_fields))
              for name, info in group.items()}
    shown = set(signature.fields)
    blob = {"lm": lm_identity(lm), "request": {k: v for k, v in request.items() if v is not None},
            "system": _system_message(lm.adapter, signature), "fields": fields,
            "demos": [{k: v for k, v in plain_demo(d).items() if k in shown} for d in demos]}
    return _digest(blob)


_IDENTITY_ADAPTERS: dict[str, dspy.Adapter] = {}


def _system_message(kind: Literal["json", "chat"], signature: type[dspy.Signature]) -> str:
    # One adapter per kind for the process: it builds a signature's system message once (lm_overhead).
    adapter = _IDENTITY_ADAPTERS.get(kind)
    if adapter is None:
        adapter = _IDENTITY_ADAPTERS.setdefault(kind, adapter_for(kind))
    return str(adapter.format_system_message(signature))


def answer_key(identity: str, inputs: Mapping[str, Any]) -> str:
    """The cache key of one call: a :func:`call_identity` and the task's inputs."""
    return _digest({"call": identity, "in": dict(inputs)})


def _digest(blob: dict[str, Any]) -> str:
    text = json.dumps(blob, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plain_demo(demo: Mapping[str, Any]) -> dict[str, Any]:
    """A demo as a plain dict (a ``dspy.Example`` or a mapping)."""
    to_dict = getattr(demo, "toDict", None)  # dspy.Example
    return dict(to_dict() if callable(to_dict) else demo)
