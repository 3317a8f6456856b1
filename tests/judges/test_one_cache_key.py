"""One answer-cache key for `judge` and `optimize` (defect 7): the same request is never paid for twice.

Both run against the demo-sensitive loopback server on the real Re-Centering stage-2 data (cut to a few users);
requests are counted at the server, and a plain request (the unoptimised judge's prompt: no demonstrations) is
told apart from an optimised one by what the server saw.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from personagap import api
from personagap.judges import get_judge
from personagap.judges.optimize import OptimizeSettings, load_examples, optimize
from personagap.judges.runner import LMConfig
from tests.support.db_cut import keep_first_users
from tests.support.demo_judge import DemoSensitiveModel, DemoSensitiveServer, Seen, item_key

JUDGE = "relevance-per-attribute"
SETTINGS = OptimizeSettings(stage="relevance", judge=JUDGE, n_users=5, budget=12, candidates=1,
                            seed=3, fractions=(0.4, 0.2, 0.4))


@pytest.fixture
def small_db(recenter_db: Path, tmp_path: Path) -> Path:
    db = tmp_path / "recenter.duckdb"
    shutil.copy(recenter_db, db)
    keep_first_users(db, 5, "recenter-stage2")
    return db


def _oracle(db: Path) -> dict[str, bool]:
    examples, _, _ = load_examples(db, get_judge(JUDGE))
    return {item_key(e.task.inputs): e.human == "yes" for e in examples}


def _plain(seen: list[Seen]) -> list[str]:
    """Items asked with the unoptimised judge's own prompt (its label field, no demonstrations)."""
    return [item_key(s.inputs) for s in seen if s.label_field == "answer" and not s.demos]


@pytest.mark.slow
def test_optimize_reuses_the_answers_a_judge_run_paid_for(small_db: Path, tmp_path: Path) -> None:
    with DemoSensitiveServer(DemoSensitiveModel(_oracle(small_db))) as server:
        lm = LMConfig(model="openai/demo-share", api_base=server.base_url)
        judged = api.judge_relevance(small_db, JUDGE, lm, progress=False)
        assert judged.judged == judged.tasks > 0 and server.count == judged.tasks
        before = len(server.log)
        result = optimize(small_db, SETTINGS, lm, tmp_path / "p.json")
        during = list(server.log[before:])
    # The unoptimised program is scored on dev and test users with the judge's own prompt: every one of those
    # requests was answered from what `judge` stored, none reached the server.
    assert _plain(during) == []
    assert result.cache_hits >= result.plan.items["dev"] + result.plan.items["test"]


@pytest.mark.slow
def test_a_judge_run_reuses_the_answers_optimize_paid_for(small_db: Path, tmp_path: Path) -> None:
    with DemoSensitiveServer(DemoSensitiveModel(_oracle(small_db))) as server:
        lm = LMConfig(model="openai/demo-share", api_base=server.base_url)
        optimize(small_db, SETTINGS, lm, tmp_path / "p.json")
        paid = set(_plain(list(server.log)))
        assert paid  # the optimiser asked some items with the plain prompt
        before = len(server.log)
        judged = api.judge_relevance(small_db, JUDGE, lm, progress=False)
        asked_again = set(_plain(list(server.log[before:]))) & paid
    assert asked_again == set()
    assert judged.cached == len(paid) and server.count - before == judged.tasks - len(paid)
