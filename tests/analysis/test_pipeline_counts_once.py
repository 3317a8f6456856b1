"""The same two answers stored twice (Re-Centering task6 = its oracle pairs) count once in the pipeline view."""

from __future__ import annotations

from pathlib import Path

import pytest

from personagap.analysis.pipeline import pipeline_db
from personagap.analysis.pipeline_records import PipelineView
from tests.support.pipe_store import item, label, write_store

# (user, personalised answer, generic answer, personalised side of the linked pair, human verdict on the task6-like
# pair in ITS positions (generic A, personalised B), judge j on the task6-like pair, judge j on the linked pair)
PAIRS = [("u1", "p1", "g1", "A", "A", "B", "B"),   # humans: generic better; j: personalised (both copies)
         ("u2", "p2", "g2", "B", "B", "A", None),  # humans: personalised better; j only on the task6-like copy
         ("u3", "p3", "g3", "A", None, "tie", "A")]  # no human verdict; j on both copies disagrees with itself
OTHER = ("u4", "p4", "g4")  # a task6-like pair no linked pair repeats: its own unit
TWO_CONDITIONS = ("u5", "p5", "g5")  # the same answers under two recorded conditions: two experiments, two units


def _store(path: Path) -> Path:
    items, labels = [], []
    for u, p, g, side, human, j_task6, j_linked in PAIRS:
        a, b = (p, g) if side == "A" else (g, p)
        items.append(item(f"link-{u}", "conditions", "response", u, prompt_index=0, kind="pairwise", answer_a=a,
                          answer_b=b, personalized=side, input_condition="oracle", system="m"))
        items.append(item(f"t6-{u}", "task6", "response", u, prompt_index=0, kind="generic_vs_personalized",
                          model_tag="m", response_no_context=g, response_personalized=p))
        labels += [label(f"t6-{u}", "hm", "human_majority", human)] if human else []
        labels.append(label(f"t6-{u}", "j", "llm", j_task6))
        labels += [label(f"link-{u}", "j", "llm", j_linked)] if j_linked else []
    u, p, g = OTHER
    items.append(item(f"t6-{u}", "task6", "response", u, prompt_index=0, kind="generic_vs_personalized",
                      model_tag="m", response_no_context=g, response_personalized=p))
    labels.append(label(f"t6-{u}", "j", "llm", "A"))
    u, p, g = TWO_CONDITIONS
    for condition in ("pipeline", "oracle"):
        items.append(item(f"{condition}-{u}", "conditions", "response", u, prompt_index=0, kind="pairwise",
                          answer_a=p, answer_b=g, personalized="A", input_condition=condition, system="m"))
    return write_store(path / "once.duckdb", items, labels)


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> PipelineView:
    return pipeline_db(_store(tmp_path_factory.mktemp("once")))


def _row(view: PipelineView, dataset: str, quantity: str, condition: str | None = None) -> object:
    (row,) = [r for r in view.rows if r.stage == 3 and r.dataset == dataset and r.quantity == quantity
              and r.input_condition == condition]
    return row


def test_repeated_pairs_are_one_unit_under_the_linked_pair(view: PipelineView) -> None:
    nb = _row(view, "conditions", "no_better_than_generic", "oracle")
    worse = _row(view, "conditions", "worse_than_generic", "oracle")
    assert (nb.n_items, nb.n_human, nb.input_condition) == (len(PAIRS) + 1, 2, "oracle")  # type: ignore[attr-defined]
    # The task6-like verdicts, read in their own positions (B = personalised): u1 generic better, u2 personalised.
    verdicts = [h for *_, h, _, _ in PAIRS if h]
    assert nb.human == pytest.approx(sum(h != "B" for h in verdicts) / len(verdicts))  # type: ignore[attr-defined]
    assert worse.human == pytest.approx(verdicts.count("A") / len(verdicts))  # type: ignore[attr-defined]
    # One label per judge and unit: the linked pair's own where it has one, else the copy's (translated).
    (j,) = nb.judges  # type: ignore[attr-defined]
    said = [(linked if linked else t6) for *_, side, _, t6, linked in PAIRS]
    sides = [side if linked else "B" for *_, side, _, _, linked in PAIRS]
    assert j.n_items == len(PAIRS)
    assert j.naive == pytest.approx(sum(s != side for s, side in zip(said, sides, strict=True)) / len(PAIRS))
    # The task6-like copies are no row of their own; the pair no one repeats is.
    rest = _row(view, "task6", "no_better_than_generic")
    assert rest.n_items == 1 and rest.judges[0].naive == 1.0  # type: ignore[attr-defined]
    pipeline = [r for r in view.rows if r.stage == 3 and r.input_condition == "pipeline"]
    assert pipeline and all(r.n_items == 1 for r in pipeline)
    assert view.counted_once == [f"task6 · m: {len(PAIRS)} pairs hold the same two answers as conditions · m · oracle "
                                 "pairs: counted once, there"]
