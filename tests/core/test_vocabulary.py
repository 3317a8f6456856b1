"""Issue 31: each vocabulary is spelled once (personagap/vocabulary.py); the rest of the package imports it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from personagap import vocabulary
from tests.support.paths import REPO

PACKAGE_DIRS = ("analysis", "stages", "judges", "human_data", "dashboard", "personagap")
HOME = REPO / "personagap" / "vocabulary.py"

_Q = r'"{}"'


def _seq(*words: str) -> str:
    # A Python tuple/list/set literal holding exactly ``words`` in this order (parsing maps like {"yes": "yes"} and
    # SQL text in single quotes are not such a literal).
    return r"[(\[{]\s*" + r",\s*".join(_Q.format(re.escape(w)) for w in words) + r"\s*,?\s*[)\]}]"


# Each vocabulary, as a literal a second definition would write.
LITERALS = {
    "VERIFICATION_LABELS": _seq("ok", "bad", "unsure"),
    "PAIRWISE_LABELS": _seq("A", "B", "tie"),
    "DECISIVE": _seq("A", "B"),
    "RELEVANCE_LABELS": _seq("yes", "no"),
    "YES_NO": _seq("no", "yes"),
    "REVERSED": r'"\+reversed"',
    "HumanSet": _seq("blind", "anchored"),
    "HUMAN_KINDS": _seq("human", "human_majority"),
    "JUDGE_KINDS": _seq("llm", "trained", "baseline"),
    "SINGLE_KINDS": _seq("persona_use", "single"),
    "ATTRIBUTE_KINDS": r'\(\s*None,\s*"extracted"\s*\)',
}

# Files another change owns at the time of writing (issue 31, build item 4 left them to it): they may still spell
# a vocabulary by hand. Drop an entry once its file imports personagap.vocabulary.
NOT_YET: set[tuple[str, str]] = set()


def _package_files() -> list[Path]:
    return sorted(p for d in PACKAGE_DIRS for p in (REPO / d).rglob("*.py") if p != HOME)


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_the_vocabulary_is_spelled_once(name: str) -> None:
    """No package module but personagap/vocabulary.py writes the vocabulary out (docstrings aside)."""
    pattern = re.compile(LITERALS[name])
    assert pattern.search(HOME.read_text(encoding="utf-8")), f"the pattern for {name} must match its home"
    found = []
    for path in _package_files():
        rel = str(path.relative_to(REPO))
        if (name, rel) in NOT_YET:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code) and "``" not in code:  # ``...`` is reST in a docstring, not a definition
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []


def test_no_second_definition_of_a_vocabulary_name() -> None:
    """``NAME = ...`` / ``NAME: T = ...`` for a vocabulary's name is written in its home only (imports re-export)."""
    names = [n for n in vocabulary.__all__ if n not in ("HumanSet", "RaterKind")] + ["HumanSet", "RaterKind",
                                                                                        "Reference", "VERDICTS",
                                                                                        "TASK1_JUDGMENTS"]
    pattern = re.compile(rf"^({'|'.join(names)})\s*(:[^=]*)?=", re.M)
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in _package_files()
             for m in pattern.finditer(p.read_text(encoding="utf-8"))]
    assert found == []


def test_the_re_exports_are_the_vocabulary_s_objects() -> None:
    from personagap import records
    from personagap.analysis import comparable
    from personagap.judges import response as judge_response
    from personagap.stages import extraction_records, response_records
    from personagap.store import pipeline_counts, response_counts

    assert records.VERIFICATION_LABELS is pipeline_counts.VERDICTS is vocabulary.VERIFICATION_LABELS
    assert records.RELEVANCE_LABELS is vocabulary.RELEVANCE_LABELS
    assert records.PAIRWISE_LABELS is vocabulary.PAIRWISE_LABELS
    assert comparable.YES_NO is vocabulary.YES_NO
    assert comparable.HUMAN_KINDS is vocabulary.HUMAN_KINDS and comparable.JUDGE_KINDS is vocabulary.JUDGE_KINDS
    assert response_counts.REVERSED is judge_response.REVERSED is response_records.REVERSED is vocabulary.REVERSED
    assert extraction_records.ATTRIBUTE_KINDS is pipeline_counts.ATTRIBUTE_KINDS is vocabulary.ATTRIBUTE_KINDS
    assert response_records.SINGLE_KINDS is vocabulary.SINGLE_KINDS


def test_the_vocabularies_agree_with_each_other() -> None:
    assert vocabulary.YES_NO == tuple(sorted(vocabulary.RELEVANCE_LABELS))
    assert vocabulary.DECISIVE == tuple(label for label in vocabulary.PAIRWISE_LABELS if label != "tie")
    assert set(vocabulary.HUMAN_KINDS) | set(vocabulary.JUDGE_KINDS) | set(vocabulary.SYSTEM_KINDS) \
        == set(vocabulary.RATER_KINDS)
    assert vocabulary.HUMAN_SETS == ("blind", "anchored")
