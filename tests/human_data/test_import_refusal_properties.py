"""Property tests (hypothesis) of the import rules issue 32 added: each rule against an independent statement of it.

The confidence rule is checked against :func:`personagap.confidence.read_confidence`, the rule every calibration
figure reads a stored confidence with: whatever the import accepts, calibration can map onto [0, 1].
"""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from personagap.confidence import read_confidence
from personagap.human_data import DataError
from personagap.human_data.label_format import MAX_CATEGORY_WORDS, MAX_INFERRED_CATEGORIES
from personagap.human_data.labels import LabelSpec, Source, load_label_sources
from personagap.human_data.prism import PROFILE_VARIANTS, parse_file_name

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ends = st.one_of(st.integers(-1000, 1000).map(str),
                 st.tuples(st.integers(-100, 100), st.integers(0, 99)).map(lambda t: f"{t[0]}.{t[1]:02d}"))


def _pair_frame(confidence: str, scale: str | None) -> pd.DataFrame:
    return pd.DataFrame([
        {"item_id": "i1", "rater": "ann", "label": "A", "response_a": "x", "response_b": "y",
         "confidence": None, "confidence_scale": None},
        {"item_id": "i1", "rater": "gpt", "rater_kind": "llm", "label": "B", "response_a": None, "response_b": None,
         "confidence": confidence, "confidence_scale": scale}])


def _load(frame: pd.DataFrame, spec: LabelSpec) -> None:
    with load_label_sources([Source(name="frame", kind="frame", frame=frame)], spec):
        pass


@SETTINGS
@given(lo=ends, hi=ends, value=st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=32),
                                         st.integers(-2000, 2000).map(float)))
def test_a_confidence_is_accepted_exactly_when_it_lies_on_its_declared_scale(lo: str, hi: str, value: float) -> None:
    scale = f"{lo}-{hi}"
    frame = _pair_frame(repr(value), scale)
    spec = LabelSpec(stage="response", dataset="p")
    if float(lo) >= float(hi):
        with pytest.raises(DataError, match="field 'confidence_scale': .* is not a confidence scale"):
            _load(frame, spec)
        return
    _, error = read_confidence(value, scale)
    if error is None:
        _load(frame, spec)  # on the scale: accepted
    else:
        with pytest.raises(DataError, match=r"frame:row 1: field 'confidence': .* is outside its declared "
                                            r"confidence_scale"):
            _load(frame, spec)


@SETTINGS
@given(value=st.floats(allow_nan=False, allow_infinity=False))
def test_any_finite_confidence_is_accepted_without_a_declared_scale(value: float) -> None:
    assert math.isfinite(value)
    _load(_pair_frame(repr(value), None), LabelSpec(stage="response", dataset="p"))


answer = st.text(alphabet="ab .", min_size=1, max_size=6).filter(lambda t: t.strip(" ") != "")


@SETTINGS
@given(a=answer, b=answer)
def test_a_pair_is_refused_exactly_when_its_two_answers_are_the_same_text(a: str, b: str) -> None:
    frame = pd.DataFrame([{"item_id": "i1", "rater": "ann", "label": "A", "response_a": a, "response_b": b}])
    spec = LabelSpec(stage="response", dataset="p")
    if a.strip(" ") == b.strip(" "):  # values are stored trimmed of spaces, so trimmed texts are compared
        with pytest.raises(DataError, match=r"frame:row 0: field 'response_b': item 'i1' has the same text"):
            _load(frame, spec)
    else:
        _load(frame, spec)


label = st.text(alphabet="ab (.", min_size=1, max_size=8).filter(lambda t: t.strip(" ") != "")


@SETTINGS
@given(labels=st.lists(label, min_size=1, max_size=16))
def test_inferred_categories_are_refused_exactly_when_implausible(labels: list[str]) -> None:
    frame = pd.DataFrame([{"item_id": f"i{i}", "rater": "ann", "label": v, "response": "r"}
                          for i, v in enumerate(labels)])
    spec = LabelSpec(stage="response", dataset="p")
    distinct = {v.strip(" ") for v in labels}
    if len(distinct) > MAX_INFERRED_CATEGORIES:
        with pytest.raises(DataError, match="more than 12 categories is no plausible nominal scale"):
            _load(frame, spec)
    elif any("(" in v for v in distinct) or any(len(v.split()) > MAX_CATEGORY_WORDS for v in distinct) \
            or any(re.search(r"\. +[^ ]", v) for v in distinct):
        with pytest.raises(DataError, match="looks like free text, not a category"):
            _load(frame, spec)
    else:
        with load_label_sources([Source(name="frame", kind="frame", frame=frame)], spec) as result:
            assert result.inferred_categories == tuple(sorted(distinct))
    # Declared, any set is the user's to choose.
    with load_label_sources([Source(name="frame", kind="frame", frame=frame)],
                            LabelSpec(stage="response", dataset="p", categories=tuple(distinct))) as result:
        assert result.inferred_categories is None


MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DATED = re.compile(rf"_(?:{'|'.join(MONTHS)})_?\d{{1,2}}$", re.IGNORECASE)
models = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,10}(_[A-Za-z0-9.\-]{1,8})?", fullmatch=True).filter(
    lambda m: not _DATED.search(m) and not m.lower().endswith("_new")
    and not any(v in m.lower() for v in PROFILE_VARIANTS))
dates = st.one_of(st.just(""), st.tuples(st.sampled_from(MONTHS), st.sampled_from(["", "_"]),
                                         st.integers(1, 31)).map(lambda t: f"{t[0]}{t[1]}{t[2]}"))


@SETTINGS
@given(model=models, date=dates, prompt=st.sampled_from(["all_features", "with_persona", "no_persona"]),
       tie=st.booleans(), judge_input=st.sampled_from(sorted(PROFILE_VARIANTS)), new=st.booleans())
def test_a_prism_file_name_gives_back_its_model_date_and_protocol(model: str, date: str, prompt: str, tie: bool,
                                                                   judge_input: str, new: bool) -> None:
    name = (f"prism_{prompt}{'_with_tie' if tie else ''}_{judge_input}_{model}" + (f"_{date}" if date else "")
            + ("_new" if new else "") + ".jsonl")
    protocol = parse_file_name(name)
    profile = "no-profile" if "no_persona" in (prompt, judge_input) else PROFILE_VARIANTS[judge_input]
    assert (protocol.model, protocol.date, protocol.profile, protocol.with_tie) == (model, date, profile, tie)
    assert protocol.rater == (f"{model}_{date}" if date else model)
