"""The confidence, repeats and jury options wired into the CLI (issue 23), end to end over real HTTP.

A loopback OpenAI-compatible server (tests/support/openai_server.py) answers `personagap judge response`; the whole path
runs through click, the stage's judge function, the runner and the store.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.judges.base import get_judge, rater_name
from personagap.judges.repeats import majority_rater
from personagap.store import opened
from tests.support import release_builders
from tests.support.openai_server import ConfidenceServer, last_user_message

MODEL = "openai/scripted"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    from personagap.stages.response import import_prism

    target = tmp_path / "wire.duckdb"
    import_prism(release_builders.write_release(tmp_path / "prism_judge", release_builders.prism()), target)
    return target


def _question(body: dict[str, Any]) -> int:
    return next(k for k in range(3) if f"Question {k}?" in last_user_message(body))


def _judge(db: Path, server: ConfidenceServer, *extra: str) -> Any:
    return CliRunner().invoke(cli, ["judge", "response", "--judge", "pairwise", "--model", MODEL, "--api-base",
                                    server.base_url, "--db", str(db), "--concurrency", "1", "--max-retries", "0",
                                    "--no-progress", *extra])


def _labels(db: Path, rater: str) -> dict[str, tuple[str | None, dict[str, Any]]]:
    with opened(db, read_only=True) as con:
        rows = con.execute("SELECT i.payload->>'question', l.label, l.meta FROM labels l JOIN items i USING (item_id) "
                           "WHERE l.rater = ?", [rater]).fetchall()
    return {q: (label, json.loads(meta) if meta else {}) for q, label, meta in rows}


def test_choices_spelled_in_the_cli_are_the_judges_own() -> None:
    from personagap._cli_base import _CONFIDENCE_CHOICES
    from personagap.commands.jury import JURY_CHOICES
    from personagap.judges.jury import JURY_RULES
    from personagap.judges.lm import CONFIDENCE_MODES

    assert _CONFIDENCE_CHOICES == CONFIDENCE_MODES
    assert JURY_CHOICES == JURY_RULES


def test_judge_confidence_verbal_and_temperature_reach_the_server_and_the_store(db: Path) -> None:
    sure = {0: 85, 1: 40, 2: 70}
    with ConfidenceServer(lambda b: json.dumps({"reason": "r", "verdict": "A", "confidence": str(sure[_question(b)])}),
                          lambda t: 0.0) as server:
        out = _judge(db, server, "--confidence", "verbal", "--temperature", "0.3")
        assert out.exit_code == 0, out.output
        assert {r["temperature"] for r in server.requests} == {0.3}
        assert all("confidence" in json.dumps(r["messages"]) for r in server.requests)  # the prompt asks for it
    labels = _labels(db, rater_name(get_judge("pairwise"), MODEL, "verbal"))
    assert {q: m["confidence"] for q, (_, m) in labels.items()} == {f"Question {k}?": float(v) for k, v in sure.items()}
    assert {m["confidence_scale"] for _, m in labels.values()} == {"0-100"}


def test_judge_confidence_logprobs_stores_the_answer_tokens_probability(db: Path) -> None:
    p_answer = 0.8
    with ConfidenceServer(lambda b: json.dumps({"reason": "r", "verdict": "A"}),
                          lambda t: math.log(p_answer) if t == "A" else 0.0) as server:
        out = _judge(db, server, "--confidence", "logprobs")
        assert out.exit_code == 0, out.output
        assert server.requests and all(r.get("logprobs") is True for r in server.requests)
    labels = _labels(db, rater_name(get_judge("pairwise"), MODEL, "logprobs"))
    assert len(labels) == 3
    for _, meta in labels.values():  # only the verdict token is unlikely: its probability is the confidence
        assert meta["confidence"] == pytest.approx(p_answer, abs=1e-4) and meta["confidence_scale"] == "probability"


def test_judge_repeats_stores_samples_majority_and_self_agreement(db: Path) -> None:
    said = {0: ["A", "A", "A"], 1: ["A", "B", "B"], 2: ["A", "B", "tie"]}
    asked: dict[int, int] = {}
    lock = threading.Lock()

    def answer(body: dict[str, Any]) -> str:
        q = _question(body)
        with lock:
            n = asked[q] = asked.get(q, 0) + 1
        return json.dumps({"reason": "r", "verdict": said[q][n - 1]})

    with ConfidenceServer(answer, lambda t: 0.0) as server:
        out = _judge(db, server, "--repeats", "3", "--temperature", "0.7")
    assert out.exit_code == 0, out.output
    assert asked == {0: 3, 1: 3, 2: 3}  # each sample asked once per item
    judge = get_judge("pairwise")
    samples = [_labels(db, rater_name(judge, MODEL, sample=k)) for k in (1, 2, 3)]
    per_q = {q: [s[f"Question {q}?"][0] for s in samples] for q in said}
    # The judge sees each pair in a seeded order, so "A" may be stored as B; which samples agree is what counts.
    assert len(set(per_q[0])) == 1 and per_q[1][0] != per_q[1][1] == per_q[1][2] and len(set(per_q[2])) == 3
    majority = _labels(db, majority_rater(judge, MODEL, 3))
    # By hand: question 0 its one label (3 of 3), question 1 samples 2 and 3's, question 2 a three-way tie: undecided.
    assert {q: label for q, (label, _) in majority.items()} == {"Question 0?": per_q[0][0], "Question 1?": per_q[1][1],
                                                                  "Question 2?": None}
    # Pooled pair agreement by hand: 3 of 3 pairs, 1 of 3, 0 of 3 -> 4 / 9.
    assert f"self-agreement [profile]: {4 / 9:.3f} (too few users for a CI: 3 users)" in out.output


def test_repeats_need_a_temperature_and_an_llm_judge(db: Path) -> None:
    with ConfidenceServer(lambda b: "{}", lambda t: 0.0) as server:
        out = _judge(db, server, "--repeats", "3")
        assert out.exit_code == 2 and "--temperature" in out.output
        assert not server.requests
    out = CliRunner().invoke(cli, ["judge", "response", "--judge", "trained", "--model-path", "m.joblib",
                                   "--repeats", "2", "--temperature", "0.5", "--db", str(db)])
    assert out.exit_code == 2 and "cannot repeat" in out.output


def test_jury_command_stores_the_vote_of_the_named_judges(db: Path) -> None:
    from personagap.commands.jury import jury_rater
    from personagap.records import Label
    from personagap.store import write_labels

    with opened(db) as con:
        items = [r[0] for r in con.execute("SELECT item_id FROM items ORDER BY item_id").fetchall()]
        (dataset,), = con.execute("SELECT DISTINCT dataset FROM items").fetchall()
        votes = {"j1": ["A", "B", "A"], "j2": ["A", "A", "B"], "j3": ["B", "A", "B"]}
        sure = {"j1": [90, 90, 60], "j2": [60, 10, 60], "j3": [60, 20, 60]}
        write_labels(con, [Label(item_id=i, rater=j, rater_kind="llm", label=v[k], run_id="r",
                                 meta={"confidence": sure[j][k], "confidence_scale": "0-100"})
                           for j, v in votes.items() for k, i in enumerate(items)])
    base = ["jury", "--stage", "response", "--dataset", dataset, "--judges", "j1,j2,j3", "--db", str(db)]
    for weighting, expected in (("majority", ["A", "A", "B"]), ("confidence", ["A", "B", "B"])):
        out = CliRunner().invoke(cli, [*base, "--weighting", weighting])
        assert out.exit_code == 0, out.output
        with opened(db, read_only=True) as con:
            got = dict(con.execute("SELECT item_id, label FROM labels WHERE rater = ?",
                                   [jury_rater(weighting, ["j1", "j2", "j3"])]).fetchall())
        # By hand (as in test_conf_jury): confidence item 2 is B 0.9 against A 0.1 + 0.2.
        assert [got[i] for i in items] == expected
    out = CliRunner().invoke(cli, [*base[:6], "j1,nobody", "--db", str(db)])
    assert out.exit_code == 2 and "no judge 'nobody'" in out.output and "j1" in out.output
    out = CliRunner().invoke(cli, [*base[:6], "j1", "--db", str(db)])
    assert out.exit_code == 2 and "at least two" in out.output


def test_route_and_jury_help_from_the_installed_console_script() -> None:
    script = Path(sys.executable).with_name("personagap")
    for command in ("route", "jury"):
        done = subprocess.run([str(script), command, "--help"], capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
        assert f"Usage: personagap {command}" in done.stdout
    judge_help = subprocess.run([str(script), "judge", "response", "--help"], capture_output=True, text=True,
                                timeout=120, check=False).stdout
    for option in ("--confidence", "--temperature", "--repeats"):
        assert option in judge_help
