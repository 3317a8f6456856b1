"""`personagap optimize response` for the PAIRWISE judge, on real PRISM items, over HTTP.

The loopback judge (tests/support/demo_judge.py) knows which answer each PRISM participant preferred, read here
straight from the release file (not through our importer's labels), whichever position the answer is shown in.
Without demonstrations it names the answer shown first (pure position bias); with demonstrations it copies the
verdict of the nearest one. Some pairs it always answers with a bare ``[`` (as the release's own judges did).
So these tests fail if demos carry the human label in the wrong order (the A/B swap), if an unparseable answer
becomes a label or stops the run, if a test user reaches the optimiser or the selection, or if what is stored
and reported differs from what was measured.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner
from sklearn.metrics import accuracy_score, cohen_kappa_score

from personagap.analysis.agreement import MIN_USERS_FOR_CI
from personagap.analysis.comparable import IN_SAMPLE
from personagap.cli import cli
from personagap.judges.optimize import OptimizeResult, OptimizeSettings, load_program, optimize, sidecar_path
from personagap.judges.runner import LMConfig
from tests.support.db_cut import keep_first_users
from tests.support.demo_judge import (
    PAIRWISE_INSTRUCTION,
    UNPARSEABLE_VERDICT,
    DemoSensitiveModel,
    DemoSensitiveServer,
    Seen,
    flip,
    item_key,
    pair_keys,
)

# One file of the release: it has ties, and no comparison twice (across files PRISM lists some twice).
PRISM_FILE = "prism_all_features_with_tie_all_features_gpt-4o.jsonl"
KEEP_USERS = 40
SEED = 3
JUDGE = "pairwise"
INPUTS = ("profile", "question", "answer_a", "answer_b")


@dataclass(frozen=True)
class Truth:
    """What the participants said, from the release file, and who they are, from the imported items."""

    preferences: dict[str, str]
    """item_key(canonical inputs) -> A, B or tie (the release's ground_truth; C is a tie)."""
    user_of: dict[str, str]
    """item_key of a pair in either order -> its user."""
    unparseable: frozenset[str]
    """Canonical keys of the pairs the loopback judge answers with a bare '['."""

    def canonical(self, inputs: dict[str, str]) -> tuple[str, bool]:
        """(the pair's canonical key, whether ``inputs`` show it the other way round)."""
        shown, other = pair_keys(inputs)
        if shown in self.preferences:
            return shown, False
        assert other in self.preferences, "the server was asked about a pair that is not in the release"
        return other, True

    def model(self) -> DemoSensitiveModel:
        return DemoSensitiveModel({}, preferences=self.preferences, unparseable=self.unparseable)


@pytest.fixture(scope="module")
def prism_db(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One PRISM file imported by the CLI, cut down to the items of a few users (the tests stay quick)."""
    db = tmp_path_factory.mktemp("pairwise") / "prism.duckdb"
    result = CliRunner().invoke(cli, ["import", "prism-judge", str(shared_data / "prism_judge" / PRISM_FILE),
                                      "--db", str(db)])
    assert result.exit_code == 0, result.output
    keep_first_users(db, KEEP_USERS, "prism-judge")
    return db


@pytest.fixture(scope="module")
def truth(prism_db: Path, shared_data: Path) -> Truth:
    con = duckdb.connect(str(prism_db), read_only=True)
    users = {(p, q, a, b): u for p, q, a, b, u in con.execute(
        "SELECT payload->>'profile', payload->>'question', payload->>'answer_a', payload->>'answer_b', user_id "
        "FROM items").fetchall()}
    con.close()
    preferences: dict[str, str] = {}
    user_of: dict[str, str] = {}
    for line in (shared_data / "prism_judge" / PRISM_FILE).read_text().splitlines():
        row = json.loads(line)
        shown = (row["user_info"], row["question"], row["asst_A"], row["asst_B"])
        if shown not in users:
            continue  # a user cut from the database
        inputs = dict(zip(INPUTS, shown, strict=True))
        preferences[item_key(inputs)] = {"A": "A", "B": "B", "C": "tie"}[row["ground_truth"]]
        for key in pair_keys(inputs):
            user_of[key] = users[shown]
    assert len(set(user_of.values())) == KEEP_USERS and set(preferences.values()) == {"A", "B", "tie"}
    unparseable = frozenset(sorted(preferences)[::9])  # every ninth pair, in every phase
    return Truth(preferences, user_of, unparseable)


def _inputs(record: dict[str, Any]) -> dict[str, str]:
    """The pairwise judge's input fields of a demo or an item payload."""
    return {k: str(record[k]) for k in INPUTS}


def _settings(**kw: object) -> OptimizeSettings:
    base = dict(stage="response", judge=JUDGE, budget=60, candidates=2, seed=SEED)
    return OptimizeSettings(**(base | kw))  # type: ignore[arg-type]


@dataclass
class Run:
    result: OptimizeResult
    log: list[Seen]
    starts: dict[str, int]
    requests: int
    program: Path

    def phase(self, name: str) -> list[Seen]:
        order = ["optimise", "dev", "test"]
        end = self.starts[order[order.index(name) + 1]] if name != "test" else len(self.log)
        return self.log[self.starts[name]:end]

    def users(self, side: str) -> set[str]:
        return set(json.loads(sidecar_path(self.program).read_text())["users"][side])


@pytest.fixture(scope="module")
def run(prism_db: Path, truth: Truth, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    program = tmp_path_factory.mktemp("program") / "pairwise.json"
    starts: dict[str, int] = {}
    with DemoSensitiveServer(truth.model()) as server:
        lm = LMConfig(model="openai/demo-pairwise", api_base=server.base_url)
        result = optimize(prism_db, _settings(), lm, program,
                          on_phase=lambda name: starts.setdefault(name, len(server.log)))
        yield Run(result, list(server.log), starts, server.count, program)


def _users_seen(seen: list[Seen], truth: Truth) -> tuple[set[str], set[str]]:
    """Users of the pairs asked about, and of the demonstrations shown, in these requests."""
    asked = {truth.user_of[item_key(s.inputs)] for s in seen if s.label_field}
    shown = {truth.user_of[item_key(d)] for s in seen for d in s.demos}
    return asked, shown


def _canonical_verdicts(seen: list[Seen], truth: Truth) -> tuple[list[str], list[str]]:
    """(human labels, the judge's verdicts mapped back to the release's A/B order) of the parseable answers.

    Worked out from what the server was shown and answered, independently of the code's swap records.
    """
    human, judged = [], []
    for s in seen:
        key, reversed_ = truth.canonical(s.inputs)
        if s.answer == UNPARSEABLE_VERDICT:
            continue
        human.append(truth.preferences[key])
        judged.append(str(flip(s.answer) if reversed_ else s.answer))
    return human, judged


def test_optimised_pairwise_judge_improves_on_test_users(run: Run, truth: Truth) -> None:
    result = run.result
    assert result.chosen != "unoptimised"
    assert set(result.test) == {"kappa", "ac1", "accuracy"}  # no over-selection for A/B/tie
    for name in ("kappa", "accuracy"):
        c = result.test[name]
        assert c.difference.ci[0] > 0.2, name  # the paired-bootstrap CI of the gain clears zero by a margin
        assert c.before.ci[0] <= c.before.value <= c.before.ci[1]
        assert c.after.ci[0] <= c.after.value <= c.after.ci[1]
    # The figures are those of the answers the server gave on the test users, read back in the release's order:
    # before = no demos (the answer shown first), after = the chosen program's demos.
    test = run.phase("test")
    before = _canonical_verdicts([s for s in test if not s.demos], truth)
    after = _canonical_verdicts([s for s in test if s.demos], truth)
    assert set(before[1]) <= {"A", "B"} and len(before[0]) == len(after[0]) == result.test_items
    assert result.test["accuracy"].before.value == pytest.approx(accuracy_score(*before))
    assert result.test["accuracy"].after.value == pytest.approx(accuracy_score(*after))
    assert result.test["kappa"].before.value == pytest.approx(cohen_kappa_score(*before))
    assert result.test["kappa"].after.value == pytest.approx(cohen_kappa_score(*after))
    assert result.test_users == len(run.users("test"))
    text = result.render()
    assert "accuracy" in text and "test users only" in text and "over_selection" not in text


def test_unparseable_answers_are_failures_not_labels(run: Run, truth: Truth) -> None:
    test_users = run.users("test")
    bad = {k for k in truth.unparseable if truth.user_of[k] in test_users}
    n_test = sum(truth.user_of[k] in test_users for k in truth.preferences)
    assert bad  # the bare '[' answers reached the optimiser too, and did not stop it
    assert any(s.answer == UNPARSEABLE_VERDICT for s in run.phase("optimise"))
    assert run.result.failures == {"before": len(bad), "after": len(bad)}
    assert run.result.test_items == n_test - len(bad)


def test_demos_carry_the_human_label_in_the_order_shown(run: Run, truth: Truth) -> None:
    """The A/B swap: a demo shown reversed must carry the human's label reversed, or it teaches the opposite."""
    model = truth.model()
    demos = [(d, label) for s in run.log for d, label in zip(s.demos, s.demo_labels, strict=True)]
    assert demos and all(label == model.shown_preference(d)[0] for d, label in demos)
    assert {truth.canonical(d)[1] for d, _ in demos} == {True, False}  # both orders were shown as demos
    assert {label for _, label in demos} == {"A", "B", "tie"}
    # The saved program keeps them the same way.
    saved = load_program(run.program).judge.demos()  # type: ignore[attr-defined]
    assert saved and all(d["verdict"] == model.shown_preference(_inputs(d))[0] for d in saved)


def test_no_test_user_before_the_test_phase(run: Run, truth: Truth) -> None:
    train, dev, test = run.users("train"), run.users("dev"), run.users("test")
    assert train and dev and test and not (train & dev | train & test | dev & test)
    assert len(train | dev | test) == KEEP_USERS
    asked, shown = _users_seen(run.phase("optimise"), truth)
    assert asked and shown and asked <= train and shown <= train
    asked, shown = _users_seen(run.phase("dev"), truth)
    assert asked == dev and shown <= train
    asked, shown = _users_seen(run.log[:run.starts["test"]], truth)
    assert not (asked | shown) & test
    asked, shown = _users_seen(run.phase("test"), truth)
    assert asked == test and shown <= train


def test_calls_are_counted_at_the_http_layer(run: Run) -> None:
    assert sum(run.result.calls.values()) == run.requests == len(run.log)
    for phase in ("optimise", "dev", "test"):
        assert run.result.calls[phase] == len(run.phase(phase))
    assert run.result.calls["optimise"] <= 60


def test_budget_caps_the_pairwise_optimiser(prism_db: Path, truth: Truth, tmp_path: Path) -> None:
    starts: dict[str, int] = {}
    with DemoSensitiveServer(truth.model()) as server:
        lm = LMConfig(model="openai/demo-pairwise-budget", api_base=server.base_url)
        result = optimize(prism_db, _settings(budget=3, candidates=3), lm, tmp_path / "b.json",
                          on_phase=lambda name: starts.setdefault(name, server.count))
    assert starts["dev"] - starts["optimise"] == result.calls["optimise"] <= 3
    assert result.budget_exhausted


def _cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


@pytest.mark.slow
def test_cli_optimize_then_judge_then_report(prism_db: Path, truth: Truth, tmp_path: Path) -> None:
    """optimize response -> judge response --program -> report response --json, all over HTTP and the CLI."""
    db = tmp_path / "cli.duckdb"
    shutil.copy(prism_db, db)
    program = tmp_path / "cli.json"
    model = "openai/demo-cli"
    with DemoSensitiveServer(truth.model()) as server:
        common = ["--model", model, "--api-base", server.base_url, "--db", str(db)]
        opt = _cli("optimize", "response", "--judge", JUDGE, "--budget", "40", "--candidates", "2",
                   "--seed", str(SEED), "--out", str(program), "--json", *common)
        assert opt.exit_code == 0, opt.output
        optimised = json.loads(opt.stdout)
        assert sum(optimised["calls"].values()) == server.count  # every call counted, none unseen
        sent = server.count
        optimise_log = list(server.log)
        judged = _cli("judge", "response", "--judge", JUDGE, "--program", str(program), "--no-progress", *common)
        assert judged.exit_code == 0, judged.output
        # Every pair answered once: asked now, or read from the answer cache the optimiser's identical requests
        # filled (one cache key for judge and optimize: the same prompt is never paid twice).
        cached = int(re.search(r"(\d[\d,]*) answered from the cache", judged.output)[1].replace(",", ""))
        assert cached > 0 and server.count - sent + cached == len(truth.preferences)
        asked_now = list(server.log[sent:])
        # The cached answers are those of the optimiser's requests identical to the program's (same demos and
        # instructions): the answers the stored labels must read back, beside the ones asked now.
        program_prompt = {(json.dumps(a.demos, sort_keys=True), a.instructions) for a in asked_now}
        assert len(program_prompt) == 1
        reused = [s for s in optimise_log if (json.dumps(s.demos, sort_keys=True), s.instructions) in program_prompt]
        log = reused + asked_now
        assert len({truth.canonical(s.inputs)[0] for s in log}) == len(truth.preferences)
        plain = _cli("judge", "response", "--judge", JUDGE, "--no-progress", *common)
        assert plain.exit_code == 0, plain.output
    saved = load_program(program)
    test_users = set(saved.meta["users"]["test"])
    # The program judges each test user's pair in the order the optimiser's test phase showed it.
    shown_in_test = {truth.canonical(s.inputs)[0]: item_key(s.inputs) for s in optimise_log
                     if truth.user_of[item_key(s.inputs)] in test_users}
    shown_now = {truth.canonical(s.inputs)[0]: item_key(s.inputs) for s in log
                 if truth.user_of[item_key(s.inputs)] in test_users}
    assert shown_in_test and shown_now == shown_in_test
    rater = f"{JUDGE}@{optimised['program_id']}/v1/{model}"
    assert saved.judge.name == f"{JUDGE}@{optimised['program_id']}"
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT i.user_id, l.condition, l.label, l.error, l.meta, i.payload FROM labels l "
                       "JOIN items i USING (item_id) WHERE l.rater = ?", [rater]).fetchall()
    con.close()
    inside = saved.in_sample_users
    assert len(rows) == len(truth.preferences)
    assert all((cond == IN_SAMPLE) == (user in inside) for user, cond, *_ in rows)
    failed = [(user, error) for user, _, label, error, _, _ in rows if label is None]
    assert len(failed) == len(truth.unparseable) and all(e.startswith("unparseable") for _, e in failed)
    # Each stored label is the server's answer read back in the item's own A/B order, and the swap it records
    # is the order the server was actually shown.
    answers = {item_key(s.inputs): s.answer for s in log}
    for _, _, label, _, meta, payload in rows:
        canonical, reversed_ = pair_keys(_inputs(json.loads(payload)))
        swapped = reversed_ in answers
        assert (canonical in answers) != swapped
        answer = answers[reversed_ if swapped else canonical]
        if label is not None:
            assert json.loads(meta)["swapped"] is swapped
            assert label == (flip(answer) if swapped else answer)
        else:
            assert answer == UNPARSEABLE_VERDICT

    report = _cli("report", "response", "--json", "--db", str(db))
    assert report.exit_code == 0, report.output
    judges = json.loads(report.stdout)["judges"]
    (mine,) = [j for j in judges if j["rater"] == rater]  # in-sample labels are not compared with humans
    (base,) = [j for j in judges if j["rater"] == f"{JUDGE}/v1/{model}"]
    assert mine["condition"] == "profile" and mine["n_users"] == len(test_users)
    assert mine["n"] == optimised["test_items"]
    assert mine["failures"] == sum(u in test_users for u, _ in failed) == optimised["failures"]["after"]
    # The stored labels on the test users are the answers the optimiser's "after" figures came from.
    after = optimised["test"]
    assert mine["kappa"] == pytest.approx(after["kappa"]["after"]["value"])
    assert mine["accuracy"] == pytest.approx(after["accuracy"]["after"]["value"])
    assert mine["kappa_ci"][0] <= mine["kappa"] <= mine["kappa_ci"][1]
    # Position bias: the unoptimised judge always names the answer shown first; the program does not.
    assert base["first_position_rate"] == 1.0
    assert mine["first_position_rate"] < 0.75
    assert mine["kappa"] > base["kappa"] + 0.3



# --------------------------------------------------------------------------- a team's own pairwise labels

TEAM_USERS = 4 * MIN_USERS_FOR_CI  # the default split gives a quarter to test: MIN_USERS_FOR_CI test users


def _team_labels(path: Path) -> tuple[dict[str, str], dict[str, str], set[str]]:
    """A made-up team's pairwise file in the one label format (docs/formats.md): three annotators per pair.

    Two annotators give each pair's preferred answer, the third a seeded random one; on every fourth user's
    last pair the three disagree (A, B, tie): no majority, so that pair has no human reference.

    Returns:
        (canonical item_key -> the two annotators' label, item_key in either order -> user, undecided keys).
    """
    import csv
    import random

    rng = random.Random(11)
    preferences: dict[str, str] = {}
    user_of: dict[str, str] = {}
    undecided: set[str] = set()
    rows = []
    for u in range(TEAM_USERS):
        user = f"team-u{u:02d}"
        for k in range(4):
            context = {"prompt": f"Request {k} from {user}: plan my week.", "profile": f"{user} works nights.",
                       "response_a": f"Plan {k}a for {user}.", "response_b": f"Plan {k}b for {user}."}
            key = item_key({"profile": context["profile"], "question": context["prompt"],
                            "answer_a": context["response_a"], "answer_b": context["response_b"]})
            truth = rng.choice(["A", "B", "tie"])
            votes = [truth, truth, rng.choice(["A", "B", "tie"])]
            if u % 4 == 0 and k == 3:
                votes = ["A", "B", "tie"]
                undecided.add(key)
            else:
                preferences[key] = truth
            for j, vote in enumerate(votes):
                rows.append({"item_id": f"{user}/r{k}", "user_id": user, "rater": f"ann-{j + 1}", "label": vote,
                             **(context if j == 0 else dict.fromkeys(context, ""))})
            other = pair_keys(json.loads(key))[1]
            user_of[key] = user_of[other] = user
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return preferences, user_of, undecided


def test_team_pairwise_import_optimises_on_majorities(tmp_path: Path) -> None:
    """`import labels` of a team's pairwise CSV -> `optimize response` over HTTP: undecided pairs never sent."""
    preferences, user_of, undecided = _team_labels(tmp_path / "team_pairs.csv")
    db = tmp_path / "team.duckdb"
    imported = _cli("import", "labels", str(tmp_path / "team_pairs.csv"), "--stage", "response", "--dataset", "team",
                    "--db", str(db))
    assert imported.exit_code == 0, imported.output
    truth = Truth(preferences, user_of, frozenset())
    program = tmp_path / "team.json"
    with DemoSensitiveServer(truth.model()) as server:
        out = _cli("optimize", "response", "--model", "openai/demo-team", "--api-base", server.base_url,
                   "--dataset", "team", "--budget", "30", "--candidates", "2",
                   "--out", str(program), "--json", "--db", str(db))
        log = list(server.log)
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)
    meta = load_program(program).meta
    test_users = set(meta["users"]["test"])
    assert len(test_users) == MIN_USERS_FOR_CI and result["test_users"] == MIN_USERS_FOR_CI
    asked = [s for s in log if s.label_field]
    # Pairs without a majority are no example: never asked, never shown as a demo.
    assert asked and not {item_key(s.inputs) for s in asked} & {k for u in undecided for k in pair_keys(json.loads(u))}
    demos = [(d, label) for s in asked for d, label in zip(s.demos, s.demo_labels, strict=True)]
    model = truth.model()
    assert demos and all(label == model.shown_preference(d)[0] for d, label in demos)  # the majority, as shown
    assert all(user_of[item_key(d)] in set(meta["users"]["train"]) for d, _ in demos)
    assert result["test_items"] == sum(user_of[k] in test_users for k in preferences)
    accuracy = result["test"]["accuracy"]
    assert accuracy["after"]["value"] > accuracy["before"]["value"]
    assert None not in accuracy["difference"]["ci"]  # MIN_USERS_FOR_CI test users: the fewest that get a CI
    assert sum(result["calls"].values()) == len(log)


@pytest.mark.slow
def test_mipro_finds_the_pairwise_instruction(prism_db: Path, truth: Truth, tmp_path: Path) -> None:
    """MIPRO's proposals reach the loopback judge, which judges by content when told to; what is saved is sent."""
    pytest.importorskip("optuna")
    starts: dict[str, int] = {}
    with DemoSensitiveServer(truth.model()) as server:
        lm = LMConfig(model="openai/demo-pairwise-mipro", api_base=server.base_url)
        result = optimize(prism_db, _settings(optimizer="mipro", budget=300, candidates=3), lm,
                          tmp_path / "m.json", on_phase=lambda name: starts.setdefault(name, len(server.log)))
        log = list(server.log)
    assert result.calls["optimise"] <= 300
    assert any(PAIRWISE_INSTRUCTION in s.instructions for s in log[:starts["dev"]] if s.label_field)
    saved = load_program(tmp_path / "m.json")
    instructions = " ".join(str(saved.judge.signature.instructions).split())
    after = [s for s in log[starts["test"]:] if s.demos or PAIRWISE_INSTRUCTION in s.instructions]
    assert result.chosen != "unoptimised"
    assert after and all(s.instructions == instructions for s in after)
    assert result.test["accuracy"].difference.ci[0] > 0.2
