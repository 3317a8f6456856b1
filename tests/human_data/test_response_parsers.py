"""Pure parsers and task builders of the stage-3 judges and adapters, on plain strings."""

from __future__ import annotations

import pandas as pd
import pytest

from personagap.human_data import DataError
from personagap.human_data.prism import parse_answer, parse_file_name
from personagap.human_data.usr import persona_facts
from personagap.judges import get_judge
from personagap.judges.base import JudgeTask
from personagap.judges.response import (
    NO_PROFILE,
    is_swapped,
    pairwise_tasks,
    parse_pairwise_verdict,
    persona_use_tasks,
    unswap,
)


@pytest.mark.parametrize(("text", "label"), [
    ("A", "A"), ("b", "B"), ("[[A]]", "A"), ("Assistant B", "B"), ("tie", "tie"), ("Tie.", "tie"), ("C", "tie"),
    ("**A**", "A"), (" answer a ", "A"),
])
def test_pairwise_verdict_parses(text: str, label: str) -> None:
    assert parse_pairwise_verdict(text) == label


@pytest.mark.parametrize("text", ["[", "N", "T", "", "A or B", "Both are good", "AB", None, 1])
def test_pairwise_verdict_unparseable(text: object) -> None:
    assert parse_pairwise_verdict(text) is None


def test_unswap() -> None:
    assert unswap("A", True) == "B" and unswap("B", True) == "A" and unswap("tie", True) == "tie"
    assert unswap("A", False) == "A"


def _task(swapped: bool) -> JudgeTask:
    return JudgeTask(key="i1", targets=("i1",), inputs={}, meta={"swapped": swapped})


def test_pairwise_judge_parse_undoes_swap_and_records_failures() -> None:
    judge = get_judge("pairwise")
    assert judge.parse({"verdict": "A", "reason": "r"}, _task(False))["i1"].label == "A"
    assert judge.parse({"verdict": "A", "reason": "r"}, _task(True))["i1"].label == "B"
    failed = judge.parse({"verdict": "N", "reason": "r"}, _task(True))["i1"]
    assert failed.label is None and failed.error.startswith("unparseable:")


def test_persona_use_judge_parse() -> None:
    judge = get_judge("persona-use")
    assert judge.parse({"uses_persona": "Yes", "reason": "x"}, _task(False))["i1"].label == "yes"
    assert judge.parse({"uses_persona": "no.", "reason": "x"}, _task(False))["i1"].label == "no"
    bad = judge.parse({"uses_persona": "maybe", "reason": "x"}, _task(False))["i1"]
    assert bad.label is None and "unparseable" in bad.error


def test_judges_are_registered_and_versioned() -> None:
    for name in ("pairwise", "persona-use"):
        judge = get_judge(name)
        assert judge.stage == "response" and judge.version >= 1
        schema = judge.response_format()
        assert schema is not None and schema["type"] == "json_schema"


def test_prism_answer_parser() -> None:
    assert parse_answer("A", with_tie=False) == ("A", None)
    assert parse_answer("C", with_tie=True) == ("tie", None)
    label, error = parse_answer("C", with_tie=False)
    assert label is None and "offered no tie" in error
    for raw in ("[", "N", "T", "I", ""):
        label, error = parse_answer(raw, with_tie=True)
        assert label is None and error.startswith("unparseable:")


@pytest.mark.parametrize(("name", "model", "condition"), [
    ("prism_all_features_command-r-plus.jsonl", "command-r-plus", "all-features"),
    ("prism_all_features_key_features_gpt-4o.jsonl", "gpt-4o", "key-features"),
    ("prism_all_features_with_tie_all_features_gpt-3.5-turbo.jsonl", "gpt-3.5-turbo", "all-features+with-tie"),
    ("prism_no_persona_command-r-plus_new.jsonl", "command-r-plus", "no-profile"),
])
def test_prism_file_names(name: str, model: str, condition: str) -> None:
    protocol = parse_file_name(name)
    assert (protocol.model, protocol.condition) == (model, condition)


@pytest.mark.parametrize("name", ["judge_gpt-4o.jsonl", "prism_gpt-4o.jsonl", "prism_other_thing_gpt-4o.jsonl"])
def test_prism_bad_file_names(name: str) -> None:
    with pytest.raises(DataError):
        parse_file_name(name)


def test_persona_facts_strip_prefix() -> None:
    assert persona_facts("your persona: i have a dog.\nyour persona: i like tea.\n") == ["i have a dog.",
                                                                                        "i like tea."]


def _pairs(n: int) -> pd.DataFrame:
    return pd.DataFrame({"item_id": [f"item-{i}" for i in range(n)], "question": ["q"] * n,
                         "answer_a": [f"first {i}" for i in range(n)], "answer_b": [f"second {i}" for i in range(n)],
                         "profile": ["likes tea"] * (n - 1) + [None]})


def test_pairwise_tasks_swap_is_seeded_recorded_and_balanced() -> None:
    items = _pairs(200)
    tasks = pairwise_tasks(items, profile=True, seed=1)
    assert len(tasks) == 199  # the item without a profile cannot be judged with one
    again = pairwise_tasks(items, profile=True, seed=1)
    assert [t.meta for t in tasks] == [t.meta for t in again]
    swapped = [t for t in tasks if t.meta["swapped"]]
    assert 70 < len(swapped) < 130
    for t in tasks:
        i = t.key.split("-")[1]
        expected = (f"second {i}", f"first {i}") if t.meta["swapped"] else (f"first {i}", f"second {i}")
        assert (t.inputs["answer_a"], t.inputs["answer_b"]) == expected
        assert t.meta["swapped"] == is_swapped(t.key, 1) and t.condition == "profile"
    other_seed = pairwise_tasks(items, profile=True, seed=2)
    assert [t.meta["swapped"] for t in other_seed] != [t.meta["swapped"] for t in tasks]


def test_pairwise_tasks_no_profile_and_both_orders() -> None:
    tasks = pairwise_tasks(_pairs(4), profile=False, seed=0, both_orders=True)
    assert len(tasks) == 8
    assert {t.inputs["profile"] for t in tasks} == {NO_PROFILE}
    by_key = {t.key: t for t in tasks}
    for i in range(4):
        fwd, rev = by_key[f"item-{i}"], by_key[f"item-{i}+reversed"]
        assert fwd.meta["swapped"] != rev.meta["swapped"]
        assert (fwd.condition, rev.condition) == ("no-profile", "no-profile+reversed")
        assert rev.targets == fwd.targets


def test_persona_use_tasks() -> None:
    items = pd.DataFrame({"item_id": ["x"], "facts": [["i have a dog.", "i like tea."]], "context": ["hi\n"],
                          "response": ["my dog says hi\n"]})
    (task,) = persona_use_tasks(items)
    assert task.inputs == {"persona_facts": "- i have a dog.\n- i like tea.", "context": "hi",
                           "response": "my dog says hi"}
    assert task.condition == ""
