"""LLM judges' confidence over real HTTP (issue 23): verbalised, and from the answer tokens' log-probabilities.

A loopback OpenAI-compatible server (tests/support/openai_server.py) answers; the whole path runs: LiteLLM, DSPy's
adapter, the judge's parser, the runner, the store. The rule tested: an answer whose label parses keeps its label
when its confidence does not parse, and the confidence's failure is recorded in the label's meta.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from personagap.judges.base import Judge, get_judge, rater_name
from personagap.judges.confidence import answer_probability, program_for
from personagap.judges.lm import LMConfig
from personagap.store import opened
from tests.support import release_builders
from tests.support.openai_server import ConfidenceServer, last_user_message

P_ANSWER = 0.8


def _release(tmp_path: Path) -> Path:
    folder = tmp_path / "prism_judge"
    folder.mkdir()
    for name, rows in release_builders.prism().items():
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture
def db(tmp_path: Path) -> Path:
    from personagap.stages.response import import_prism

    target = tmp_path / "conf.duckdb"
    import_prism(_release(tmp_path), target)
    return target


def _question(body: dict[str, Any]) -> int:
    text = last_user_message(body)
    return next(k for k in range(3) if f"Question {k}?" in text)


def _judge(db: Path, server: ConfidenceServer, confidence: str) -> Any:
    from personagap.stages.response import judge_response

    lm = LMConfig(model="openai/scripted", api_base=server.base_url, confidence=confidence)  # type: ignore[arg-type]
    return judge_response(db, "pairwise", lm, profile=True, concurrency=2, progress=False, max_retries=0)


def _labels(db: Path, rater: str) -> dict[str, tuple[str | None, dict[str, Any]]]:
    with opened(db, read_only=True) as con:
        rows = con.execute("SELECT i.payload->>'question', l.label, l.meta FROM labels l JOIN items i USING (item_id) "
                           "WHERE l.rater = ?", [rater]).fetchall()
    return {q: (label, json.loads(meta) if meta else {}) for q, label, meta in rows}


def test_verbal_confidence_is_stored_and_a_bad_one_fails_only_its_field(db: Path) -> None:
    answers = {0: '{"reason": "Fits.", "verdict": "A", "confidence": "85"}',
               1: '{"reason": "Fits.", "verdict": "B", "confidence": "very sure"}',
               2: '{"reason": "Fits.", "verdict": "A"}'}
    with ConfidenceServer(lambda body: answers[_question(body)], lambda t: 0.0) as server:
        summary = _judge(db, server, "verbal")
        assert all("confidence" in json.dumps(r["messages"]) for r in server.requests)  # the prompt asks for it
    assert summary.judged == 3 and summary.failed == 0
    labels = _labels(db, rater_name(get_judge("pairwise"), "openai/scripted", "verbal"))
    assert labels["Question 0?"][1]["confidence"] == 85.0
    assert labels["Question 0?"][1]["confidence_scale"] == "0-100"
    for q in ("Question 1?", "Question 2?"):
        label, meta = labels[q]
        assert label in ("A", "B")  # the label stands
        assert "confidence" not in meta and meta["confidence_error"]
    # The verbal judge answers another prompt: another rater, and no label of the plain judge.
    assert not _labels(db, rater_name(get_judge("pairwise"), "openai/scripted"))


def test_logprob_confidence_is_the_answer_tokens_probability(db: Path) -> None:
    text = '{"reason": "Fits.", "verdict": "A"}'

    def logprob(token: str) -> float:
        return math.log(P_ANSWER) if token == "A" else -0.01

    with ConfidenceServer(lambda body: text, logprob) as server:
        summary = _judge(db, server, "logprobs")
        assert all(r.get("logprobs") is True for r in server.requests)
        assert summary.judged == 3
        rater = rater_name(get_judge("pairwise"), "openai/scripted")
        for _label, meta in _labels(db, rater).values():
            assert meta["confidence"] == pytest.approx(P_ANSWER, abs=1e-4)
            assert meta["confidence_scale"] == "probability"
        # A rerun answers from the cache (no log-probabilities in cached text) and stores the same confidence.
        server.with_logprobs, sent = False, len(server.requests)
        again = _judge(db, server, "logprobs")
        assert len(server.requests) == sent
    assert again.cached == 3
    assert all(meta["confidence"] == pytest.approx(P_ANSWER, abs=1e-4) for _, meta in _labels(db, rater).values())


def test_server_without_logprobs_fails_the_confidence_not_the_label(db: Path) -> None:
    with ConfidenceServer(lambda body: '{"reason": "x", "verdict": "B"}', lambda t: 0.0,
                          with_logprobs=False) as server:
        summary = _judge(db, server, "logprobs")
    assert summary.judged == 3 and summary.failed == 0
    for label, meta in _labels(db, rater_name(get_judge("pairwise"), "openai/scripted")).values():
        assert label in ("A", "B")
        assert "confidence" not in meta and "log-probabilities" in meta["confidence_error"]


def test_answer_probability_counts_only_the_answer_fields_tokens() -> None:
    # The reason quotes "A" with another probability: only the verdict's token counts.
    tokens = [('{"', 0.0), ("verdict", 0.0), ('": "', 0.0), ("A", math.log(0.8)), ('", "', 0.0), ("reason", 0.0),
              ('": "', 0.0), ("A", math.log(0.3)), (" fits", -0.2), ('"}', 0.0)]
    raw = "".join(t for t, _ in tokens)
    p, why = answer_probability(raw, "verdict", "A", tokens)
    assert why == "" and p == pytest.approx(0.8)
    # A two-token answer: the product of both tokens' probabilities.
    tokens2 = [('{"answer": "', 0.0), ("Y", math.log(0.9)), ("ES", math.log(0.5)), ('"}', -1.0)]
    p2, _ = answer_probability("".join(t for t, _ in tokens2), "answer", "YES", tokens2)
    assert p2 == pytest.approx(0.45)
    assert answer_probability(raw, "verdict", "A", None)[0] is None


def test_logprobs_is_refused_for_a_judge_answering_several_items_at_once() -> None:
    batched: Judge = get_judge("relevance-batched")
    with pytest.raises(ValueError, match="one answer per item"):
        program_for(batched, "logprobs")
