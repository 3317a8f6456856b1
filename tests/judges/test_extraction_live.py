"""Stage 1 live: the extractor and verifier over real LAPS users through HTTP (loopback scripted server)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from personagap.judges.runner import LMConfig
from personagap.stages.extraction import import_laps, judge_extraction, report_extraction
from tests.support.openai_server import ScriptedOpenAIServer, last_user_message

_USER_TURN = re.compile(r"^\[(s\d+t\d+)\] User: (.*)$", re.MULTILINE)


def _extractor(body: dict) -> str:
    """A scripted 'model': every user turn becomes an attribute citing that turn; one user cites a bad turn."""
    text = last_user_message(body)
    if "[[ ## attribute ## ]]" in text:
        return json.dumps({"reason": "stated in the cited turn", "answer": "OK"})
    turns = _USER_TURN.findall(text)
    attrs = [{"attribute": f"The user said: {msg}", "turn_ids": [tid], "confidence": 0.7} for tid, msg in turns]
    if "no horror" in text.lower():
        attrs.append({"attribute": "made up", "turn_ids": ["s99t99"], "confidence": 0.1})
    return json.dumps({"attributes": attrs})


@pytest.fixture
def laps_val_db(shared_data: Path, tmp_path: Path) -> Path:
    db = tmp_path / "live.duckdb"
    import_laps(shared_data / "laps" / "movie_dataset_val.json", db)
    return db


@pytest.mark.slow
def test_extract_then_verify_live_reports_precision_recall(laps_val_db: Path):
    with ScriptedOpenAIServer(_extractor) as server:
        lm = LMConfig(model="openai/scripted", api_base=server.base_url)
        summary = judge_extraction(laps_val_db, "extract", lm, limit=4, concurrency=2, progress=False)
        assert summary.tasks >= 4 and server.count == summary.tasks
        assert summary.judged + summary.failed == summary.tasks
        report = report_extraction(laps_val_db)
        (run,) = report.extractors
        assert run.extractor == "extract/v1/openai/scripted" and run.units_attempted == 4
        assert 1 <= run.units_complete <= 4 and run.chunk_failures == summary.failed
        assert run.attributes > 0
        overall = [m for m in report.matching if m.category == "all"]
        assert len(overall) == 1 and overall[0].split == "val" and overall[0].users == run.units_complete
        m = overall[0]
        assert 0 < m.precision < 1 and 0 < m.recall <= 1
        assert m.users < 5 and all(math.isnan(b) for b in m.precision_ci)  # too few users for a CI: none is given

        # Rerun: every answer comes from the cache, no request is sent.
        before = server.count
        again = judge_extraction(laps_val_db, "extract", lm, limit=4, progress=False)
        assert server.count == before and again.cached == again.tasks

        verify = judge_extraction(laps_val_db, "verify", lm, limit=5, progress=False)
        assert verify.judged == 5
    report = report_extraction(laps_val_db)
    (row,) = [r for r in report.acceptance if r.rater.startswith("verify/v1")]
    assert row.n == 5 and row.ok == 1.0


def test_invalid_turn_id_fails_the_whole_history(laps_val_db: Path):
    import duckdb

    def always_bad(body: dict) -> str:
        return json.dumps({"attributes": [{"attribute": "x", "turn_ids": ["nope"], "confidence": 0.5}]})

    with ScriptedOpenAIServer(always_bad) as server:
        summary = judge_extraction(laps_val_db, "extract", LMConfig(model="openai/bad", api_base=server.base_url),
                                   limit=2, progress=False)
    assert summary.judged == 0 and summary.failed == summary.tasks
    assert summary.failures_by_reason == {"invalid": summary.tasks}
    with duckdb.connect(str(laps_val_db), read_only=True) as con:
        errors = con.execute("SELECT error FROM labels WHERE rater = 'extract/v1/openai/bad'").fetchall()
    assert errors and all(e[0].startswith("invalid:") for e in errors)
    report = report_extraction(laps_val_db)
    assert report.extractors[0].units_complete == 0 and report.matching == []


@pytest.mark.slow
def test_llm_matcher_live_feeds_precision_recall_and_skips_incomplete_units(laps_val_db: Path):
    """Stage 1's LLM matcher end to end: extract, then match every (attribute, gold) pair over HTTP.

    A matcher that says SAME to every pair must give precision = recall = 1, one that says DIFFERENT
    must give 0 and 0 (hand-worked: any attribute matching any gold counts both ways), and a unit with
    one unparseable verdict has not been judged whole, so it drops out of that matcher's figures.
    """
    with ScriptedOpenAIServer(_extractor) as server:
        judge_extraction(laps_val_db, "extract", LMConfig(model="openai/scripted", api_base=server.base_url),
                         limit=3, progress=False)

    def matcher(verdict: str, spoil: str | None = None):
        def answer(body: dict) -> str:
            text = last_user_message(body)
            assert "[[ ## preference ## ]]" in text  # the match judge's prompt, not the extractor's
            if spoil is not None and spoil in text:
                return json.dumps({"reason": "unsure", "answer": "MAYBE"})
            return json.dumps({"reason": "scripted", "answer": verdict})
        return answer

    report = report_extraction(laps_val_db)
    offline = [m for m in report.matching if m.category == "all" and m.matcher.startswith("offline@")]
    assert len(offline) == 1
    units = offline[0].users
    assert units >= 2

    summaries = {}
    first_pair_attr = None
    for model, verdict in [("all-same", "SAME"), ("all-different", "DIFFERENT"), ("one-spoilt", "SAME")]:
        spoil = None
        if model == "one-spoilt":
            spoil = first_pair_attr
        with ScriptedOpenAIServer(matcher(verdict, spoil)) as server:
            summaries[model] = judge_extraction(laps_val_db, "match",
                                                LMConfig(model=f"openai/{model}", api_base=server.base_url),
                                                progress=False)
            if first_pair_attr is None:
                first_pair_attr = re.search(r"\[\[ ## attribute ## \]\]\n(.*)", last_user_message(
                    server.requests[0])).group(1)
    assert summaries["all-same"].failed == 0 and summaries["all-same"].judged == summaries["all-same"].tasks
    assert summaries["one-spoilt"].failed >= 1
    assert summaries["one-spoilt"].failures_by_reason == {"unparseable": summaries["one-spoilt"].failed}

    report = report_extraction(laps_val_db)
    rows = {m.matcher: m for m in report.matching if m.category == "all"}
    same, different = rows["match/v1/openai/all-same"], rows["match/v1/openai/all-different"]
    assert same.users == different.users == units
    assert (same.precision, same.recall) == (1.0, 1.0)
    assert (different.precision, different.recall) == (0.0, 0.0)
    assert rows["match/v1/openai/one-spoilt"].users < units
