"""`personagap optimize` against a demo-sensitive loopback server, on the real Re-Centering stage-2 data.

The server (tests/support/demo_judge.py) answers YES to everything without demonstrations and copies the
label of the nearest demonstration when there are some, so these tests fail if the optimised program does
not carry its demos, if test users' items reach the optimiser or the selection, or if the reload loses them.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.metrics import balanced_accuracy_score

from personagap.analysis.ci_rule import UNEQUAL_ITEMS_MIN_USERS
from personagap.analysis.comparable import IN_SAMPLE
from personagap.cli import cli
from personagap.judges import get_judge
from personagap.judges.base import JudgeTask
from personagap.judges.optimize import (
    Example,
    OptimizeError,
    OptimizeResult,
    OptimizeSettings,
    balanced_metric,
    class_weights,
    judge_with_program,
    load_examples,
    load_program,
    optimize,
    sidecar_path,
    split_users,
    table_metric,
)
from personagap.judges.runner import LMConfig
from tests.support.db_cut import keep_first_users
from tests.support.demo_judge import STRICT_INSTRUCTION, DemoSensitiveModel, DemoSensitiveServer, Seen, item_key
from tests.support.stores import copy_store

N_USERS = 33  # every user of the release's stage 2
KEEP_USERS = 33
# 2 train, 1 dev and 30 test users: the real users' items are very unequal, and an item-weighted interval then
# needs UNEQUAL_ITEMS_MIN_USERS (30) users (the CI rule); the demo-sensitive server needs only a few demos.
FRACTIONS = (0.06, 0.03, 0.91)
JUDGE = "relevance-per-attribute"


@dataclass
class Run:
    result: OptimizeResult
    log: list[Seen]
    phase_start: dict[str, int]
    requests: int
    db: Path
    program: Path
    user_of: dict[str, str]
    oracle: dict[str, bool]


@pytest.fixture(scope="module")
def opt_db(recenter_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real release, cut down to the stage-2 items of a few users (the tests stay quick)."""
    target = tmp_path_factory.mktemp("optimize") / "recenter.duckdb"
    shutil.copy(recenter_db, target)
    keep_first_users(target, KEEP_USERS, "recenter-stage2")
    return target


@pytest.fixture(scope="module")
def data(opt_db: Path) -> tuple[dict[str, str], dict[str, bool]]:
    """item key (the inputs the server sees) -> user, and -> human says yes, from the real data."""
    examples, _, _ = load_examples(opt_db, get_judge(JUDGE))
    user_of = {item_key(e.task.inputs): e.user_id for e in examples}
    oracle = {item_key(e.task.inputs): e.human == "yes" for e in examples}
    return user_of, oracle


def _settings(**kw: object) -> OptimizeSettings:
    base = dict(stage="relevance", judge=JUDGE, n_users=N_USERS, budget=60, candidates=2, seed=3,
                fractions=FRACTIONS)
    return OptimizeSettings(**(base | kw))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def run(opt_db: Path, data: tuple[dict[str, str], dict[str, bool]],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    user_of, oracle = data
    program = tmp_path_factory.mktemp("program") / "prog.json"
    phase_start: dict[str, int] = {}
    with DemoSensitiveServer(DemoSensitiveModel(oracle)) as server:
        lm = LMConfig(model="openai/demo", api_base=server.base_url)
        result = optimize(opt_db, _settings(), lm, program,
                          on_phase=lambda name: phase_start.setdefault(name, len(server.log)))
        yield Run(result, list(server.log), phase_start, server.count, opt_db, program, user_of, oracle)


def _users_seen(seen: list[Seen], user_of: dict[str, str]) -> tuple[set[str], set[str]]:
    """Users of the items asked about, and of the demonstrations shown, in these requests."""
    asked = {user_of[item_key(s.inputs)] for s in seen if s.label_field}
    shown = {user_of[item_key(d)] for s in seen for d in s.demos}
    return asked, shown


@pytest.mark.slow
def test_demo_sensitive_judge_improves_on_test_users(run: Run) -> None:
    assert run.result.test_users == UNEQUAL_ITEMS_MIN_USERS
    kappa = run.result.test["kappa"]
    assert run.result.chosen != "unoptimised"
    assert kappa.before.value == pytest.approx(0.0)  # YES to everything: no agreement beyond chance
    assert kappa.difference.ci[0] > 0.2  # the paired-bootstrap CI of the gain excludes zero
    # YES to everything on every user: no user's absence moves kappa, so no zero-width interval is printed.
    assert math.isnan(kappa.before.ci[0]) and "does not change" in kappa.before.reason
    assert kappa.after.ci[0] <= kappa.after.value <= kappa.after.ci[1]
    over = run.result.test["over_selection"]
    assert over.before.value > 3 and abs(over.after.value - 1) < abs(over.before.value - 1)
    assert run.result.test["ac1"].after.value > run.result.test["ac1"].before.value
    text = run.result.render()
    assert "test users only" in text and "after - before" in text


@pytest.mark.slow
def test_no_test_user_in_train_or_dev(run: Run) -> None:
    meta = json.loads(sidecar_path(run.program).read_text())
    train, dev, test = (set(meta["users"][k]) for k in ("train", "dev", "test"))
    assert train and dev and test and not (train & dev) and not (train & test) and not (dev & test)
    assert len(train | dev | test) == N_USERS and meta["split_seed"] == 3
    # What the optimiser actually sent: only train users' items were asked about or shown as demos.
    optimise = run.log[run.phase_start["optimise"]:run.phase_start["dev"]]
    asked, shown = _users_seen(optimise, run.user_of)
    assert asked and shown and asked <= train and shown <= train
    # Dev selection asked about dev users only and showed train users' demos only.
    asked, shown = _users_seen(run.log[run.phase_start["dev"]:run.phase_start["test"]], run.user_of)
    assert asked == dev and shown <= train


def test_selection_never_touched_test_data(run: Run) -> None:
    meta = json.loads(sidecar_path(run.program).read_text())
    test = set(meta["users"]["test"])
    before_test = run.log[:run.phase_start["test"]]
    asked, shown = _users_seen(before_test, run.user_of)
    assert not (asked & test) and not (shown & test)
    asked, shown = _users_seen(run.log[run.phase_start["test"]:], run.user_of)
    assert asked == test and not (shown & test)  # the test phase only asks about test users
    # Every request the run made is in the server's log, counted by phase.
    assert sum(run.result.calls.values()) == run.requests == len(run.log)
    assert run.result.calls["optimise"] == run.phase_start["dev"] - run.phase_start["optimise"]


@pytest.mark.slow
def test_saved_program_carries_its_demos(run: Run, data: tuple[dict[str, str], dict[str, bool]]) -> None:
    import dspy

    raw = json.loads(run.program.read_text())  # DSPy's own save format: predictor state with demos
    (state,) = raw.values() if "demos" not in raw else (raw,)
    assert state["demos"]
    saved = load_program(run.program)
    assert saved.judge.name == f"{JUDGE}@{run.result.program_id}"
    demos = saved.judge.demos()  # type: ignore[attr-defined]
    assert len(demos) == len(state["demos"])
    train = set(saved.meta["users"]["train"])
    assert {run.user_of[item_key({k: d[k] for k in ("prompt", "attribute")})] for d in demos} <= train
    # Reloaded, the program sends its demos: the server sees them (and answers from them).
    _, oracle = data
    example = next(e for e in load_examples(run.db, get_judge(JUDGE))[0] if e.user_id in saved.meta["users"]["test"])
    program = dspy.Predict(saved.judge.signature)
    program.load(str(run.program))
    with DemoSensitiveServer(DemoSensitiveModel(oracle)) as server:
        lm = dspy.LM("openai/demo", api_base=server.base_url, api_key="x", cache=False)
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            program(**example.task.inputs)
    (seen,) = server.log
    assert len(seen.demos) == len(demos) and all(lab in ("yes", "no") for lab in seen.demo_labels)


@pytest.mark.slow
def test_judging_with_the_program_stores_in_sample_labels(run: Run, tmp_path: Path) -> None:
    db = tmp_path / "judge.duckdb"
    shutil.copy(run.db, db)
    saved = load_program(run.program)
    with DemoSensitiveServer(DemoSensitiveModel(run.oracle)) as server:
        lm = LMConfig(model="openai/demo", api_base=server.base_url)
        summary = judge_with_program(db, run.program, lm, progress=False, concurrency=4)
        log = list(server.log)
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT l.condition, i.user_id FROM labels l JOIN items i USING (item_id) WHERE l.rater = ?",
                       [summary.rater]).fetchall()
    con.close()
    assert summary.rater.startswith(f"{JUDGE}@{run.result.program_id}/v1/")
    inside = saved.in_sample_users
    assert rows and all((cond == IN_SAMPLE) == (user in inside) for cond, user in rows)
    assert {c for c, _ in rows} == {IN_SAMPLE, ""}
    assert log and all(len(s.demos) == len(saved.judge.demos()) for s in log)  # type: ignore[attr-defined]


def _counted_run(db: Path, oracle: dict[str, bool], settings: OptimizeSettings,
                 out: Path) -> tuple[OptimizeResult, dict[str, int]]:
    """Optimise against a fresh server (own model name: no cached answers); requests sent before each phase."""
    starts: dict[str, int] = {}
    with DemoSensitiveServer(DemoSensitiveModel(oracle)) as server:
        lm = LMConfig(model=f"openai/demo-{out.stem}", api_base=server.base_url)
        result = optimize(db, settings, lm, out, on_phase=lambda name: starts.setdefault(name, server.count))
    return result, starts


@pytest.mark.slow
def test_budget_caps_the_optimiser_calls(opt_db: Path, data: tuple[dict[str, str], dict[str, bool]],
                                         tmp_path: Path) -> None:
    result, starts = _counted_run(opt_db, data[1], _settings(budget=2, candidates=3), tmp_path / "p.json")
    assert starts["dev"] - starts["optimise"] == result.calls["optimise"] <= 2
    assert result.budget_exhausted


@pytest.mark.slow
def test_rerun_answers_from_the_cache(opt_db: Path, data: tuple[dict[str, str], dict[str, bool]],
                                      tmp_path: Path) -> None:
    _, oracle = data
    settings = _settings(n_users=5, candidates=1)
    with DemoSensitiveServer(DemoSensitiveModel(oracle)) as server:
        lm = LMConfig(model="openai/demo-cache", api_base=server.base_url)
        first = optimize(opt_db, settings, lm, tmp_path / "a.json")
        sent = server.count
        second = optimize(opt_db, settings, lm, tmp_path / "b.json")
        assert server.count == sent  # nothing sent twice
    assert sum(first.calls.values()) == sent and sum(second.calls.values()) == 0
    assert second.cache_hits >= sent
    assert second.test["kappa"].after.value == first.test["kappa"].after.value
    # The same model name on another server is another model: asked again, never served from the cache.
    with DemoSensitiveServer(DemoSensitiveModel(oracle)) as other:
        third = optimize(opt_db, settings, LMConfig(model="openai/demo-cache", api_base=other.base_url),
                         tmp_path / "c.json")
        assert other.count == sent
    assert sum(third.calls.values()) == sent


def test_dry_run_prints_the_plan_and_sends_nothing(opt_db: Path, data: tuple[dict[str, str], dict[str, bool]]) -> None:
    _, oracle = data
    with DemoSensitiveServer(DemoSensitiveModel(oracle)) as server:
        result = CliRunner().invoke(cli, ["optimize", "relevance", "--model", "openai/demo", "--api-base",
                                          server.base_url, "--dry-run", "--users", "9", "--db", str(opt_db)])
        assert server.count == 0
    assert result.exit_code == 0, result.output
    assert "train 4, dev 2, test 3" in result.output and "LLM calls at most: optimiser 200" in result.output


@pytest.mark.slow
def test_cli_runs_end_to_end(opt_db: Path, data: tuple[dict[str, str], dict[str, bool]], tmp_path: Path) -> None:
    _, oracle = data
    out = tmp_path / "cli.json"
    with DemoSensitiveServer(DemoSensitiveModel(oracle)) as server:
        result = CliRunner().invoke(cli, ["optimize", "relevance", "--model", "openai/demo-cli", "--api-base",
                                          server.base_url, "--users", "6", "--candidates", "1", "--budget", "20",
                                          "--metric", "ac1", "--out", str(out),
                                          "--db", str(opt_db)])
    assert result.exit_code == 0, result.output
    assert "test users only" in result.output and "calls used: optimiser" in result.output
    # --users 6 leaves one test user: figures, but no CI (the project's rule: none below 5 users).
    assert "(too few users for a CI: 1 test user;" in result.output and "[no CI]" in result.output
    scores = json.loads(sidecar_path(out).read_text())["scores"]
    assert scores["test_users"] == 1 and scores["test"]["kappa"]["after"]["ci"] == [None, None]
    meta = json.loads(sidecar_path(out).read_text())
    assert meta["metric"] == "ac1" and meta["optimizer"] == "bootstrap-fewshot" and len(meta["data_fingerprint"]) == 64


def test_bad_program_file_is_one_line(tmp_path: Path, opt_db: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text("{}")
    with pytest.raises(OptimizeError, match="sidecar is missing"):
        load_program(bad)
    sidecar_path(bad).write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(OptimizeError, match="field 'format'"):
        load_program(bad)


# --------------------------------------------------------------------------- pure parts

def test_split_is_by_user_and_seeded() -> None:
    users = [f"u{i}" for i in range(20)]
    a, b = split_users(users, 7), split_users(users, 7)
    assert a == b and split_users(users, 8) != a
    assert sorted(a.train + a.dev + a.test) == sorted(users)
    assert (len(a.train), len(a.dev), len(a.test)) == (10, 5, 5)
    with pytest.raises(OptimizeError):
        split_users(["u1", "u2"], 0)


def test_class_weights_balance_the_classes() -> None:
    task = JudgeTask(key="k", targets=("k",), inputs={})
    examples = [Example(f"i{i}", "u", task, "yes" if i < 2 else "no") for i in range(10)]
    w = class_weights(examples, ("no", "yes"))
    assert w == {"yes": pytest.approx(10 / (2 * 2)), "no": pytest.approx(10 / (2 * 8))}
    # Each class carries the same total weight: always-"no" scores 0.5 on average, not 0.8.
    judge = get_judge(JUDGE)
    tasks = {e.item_id: JudgeTask(key=e.item_id, targets=(e.item_id,), inputs={}) for e in examples}
    examples = [Example(e.item_id, "u", tasks[e.item_id], e.human) for e in examples]
    metric = balanced_metric(judge, examples, w)
    always_no = np.mean([metric({"item_id": e.item_id}, {"answer": "NO", "reason": "r"}) for e in examples])
    assert always_no == pytest.approx(0.5)
    assert metric({"item_id": "i0"}, {"answer": "maybe", "reason": "r"}) == 0.0  # unparseable scores nothing


def test_selection_metrics_match_references() -> None:
    rng = np.random.default_rng(0)
    h = rng.integers(0, 2, 200)
    j = np.where(rng.random(200) < 0.7, h, 1 - h)
    table = np.zeros((2, 2))
    np.add.at(table, (h, j), 1)
    assert float(table_metric("balanced-accuracy")(table)) == pytest.approx(balanced_accuracy_score(h, j))
    # Gwet's AC1 by hand: pi = mean share of "yes" over both raters; pe = 2 pi (1 - pi).
    po = float(np.mean(h == j))
    pi = (h.mean() + j.mean()) / 2
    pe = 2 * pi * (1 - pi)
    assert float(table_metric("ac1")(table)) == pytest.approx((po - pe) / (1 - pe))


@pytest.mark.slow
def test_simba_stays_within_budget(opt_db: Path, data: tuple[dict[str, str], dict[str, bool]],
                                   tmp_path: Path) -> None:
    result, starts = _counted_run(opt_db, data[1], _settings(optimizer="simba", budget=24, candidates=2, n_users=5),
                                      tmp_path / "s.json")
    assert starts["dev"] - starts["optimise"] == result.calls["optimise"] <= 24
    assert [c["name"] for c in result.candidates][0] == "unoptimised" and len(result.candidates) >= 1
    assert load_program(tmp_path / "s.json").meta["optimizer"] == "simba"


@pytest.mark.slow
def test_mipro_finds_the_instruction_the_model_follows(opt_db: Path, data: tuple[dict[str, str], dict[str, bool]],
                                                       tmp_path: Path) -> None:
    pytest.importorskip("optuna")
    _, oracle = data
    starts: dict[str, int] = {}
    with DemoSensitiveServer(DemoSensitiveModel(oracle)) as server:
        lm = LMConfig(model="openai/demo-mipro", api_base=server.base_url)
        result = optimize(opt_db, _settings(optimizer="mipro", budget=700, candidates=3, n_users=6),
                          lm, tmp_path / "m.json", on_phase=lambda name: starts.setdefault(name, len(server.log)))
        log = list(server.log)
    assert result.calls["optimise"] <= 700
    saved = load_program(tmp_path / "m.json")
    instructions = str(saved.judge.signature.instructions)
    # What the test phase sent is what was saved: the chosen program's instructions and demos.
    after = [s for s in log[starts["test"]:] if s.demos or STRICT_INSTRUCTION in s.instructions]
    if result.chosen == "unoptimised":
        assert not after
    else:
        assert after and all(s.instructions == " ".join(instructions.split()) for s in after)
        assert result.test["kappa"].after.value > result.test["kappa"].before.value


def test_response_persona_use_on_usr(usr_release_db: Path, tmp_path: Path) -> None:
    db = copy_store(usr_release_db, tmp_path / "usr.duckdb")
    examples, _, _ = load_examples(db, get_judge("persona-use"))
    oracle = {item_key(e.task.inputs): e.human == "yes" for e in examples}
    starts: dict[str, int] = {}
    with DemoSensitiveServer(DemoSensitiveModel(oracle)) as server:
        lm = LMConfig(model="openai/demo", api_base=server.base_url)
        # 10 train, 4 dev and MIN_USERS_FOR_CI (10) test users: the gain's CI needs that many.
        result = optimize(db, OptimizeSettings(stage="response", judge="persona-use", n_users=24, budget=40,
                                               candidates=2, seed=1, fractions=(0.4, 0.15, 0.45)),
                          lm, tmp_path / "r.json", on_phase=lambda name: starts.setdefault(name, len(server.log)))
        log = list(server.log)
    meta = load_program(tmp_path / "r.json").meta
    user_of = {item_key(e.task.inputs): e.user_id for e in examples}
    asked, shown = _users_seen(log[:starts["test"]], user_of)
    assert not (asked | shown) & set(meta["users"]["test"])
    assert result.test["kappa"].difference.ci[0] > 0


def test_max_items_samples_within_each_side(opt_db: Path) -> None:
    from personagap.judges.optimize import plan_run

    lm = LMConfig(model="openai/x", api_base="http://127.0.0.1:9/v1")
    # More train users than the main run's two, so that 12 sampled train items hold both classes.
    wide = (0.3, 0.1, 0.6)
    full, _, _ = plan_run(opt_db, _settings(fractions=wide), lm)
    small, examples, _ = plan_run(opt_db, _settings(max_items=12, fractions=wide), lm)
    assert small.split == full.split  # the users are split first; items are sampled inside each side
    assert small.items == {"train": 12, "dev": 12, "test": 12} and small.max_calls["test"] == 24


def test_judge_command_wiring_runs_the_program(run: Run, tmp_path: Path) -> None:
    """`personagap judge relevance --program PROGRAM` (the real CLI) runs the saved program."""
    from click.testing import Result

    from personagap.cli import cli

    def judge(args: list[str]) -> Result:
        return CliRunner().invoke(cli, ["judge", "relevance", *args])

    db = tmp_path / "wiring.duckdb"
    shutil.copy(run.db, db)
    with DemoSensitiveServer(DemoSensitiveModel(run.oracle)) as server:
        ok = judge(["--program", str(run.program), "--limit", "5", "--model", "openai/demo",
                    "--api-base", server.base_url, "--no-progress", "--db", str(db)])
        wrong = judge(["--judge", "relevance-batched", "--program", str(run.program), "--model",
                       "openai/demo", "--api-base", server.base_url, "--db", str(db)])
        missing = judge(["--program", str(tmp_path / "none.json"), "--model", "openai/demo", "--db", str(db)])
        assert server.count == 5
    assert ok.exit_code == 0, ok.output
    assert f"{JUDGE}@{run.result.program_id}/v1/openai/demo" in ok.output
    for bad in (wrong, missing):
        assert bad.exit_code == 2 and "Traceback" not in bad.output and len(bad.output.strip().splitlines()) == 1
