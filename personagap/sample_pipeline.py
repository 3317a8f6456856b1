"""A linked SAMPLE pipeline for `personagap demo`, with planted failure rates and a planted cascade.

SAMPLE DATA, NOT HUMAN JUDGMENTS. Every user, attribute, prompt, answer and label here is generated (seeded)
for this project to show the pipeline view end to end offline; its numbers say nothing about any real model
or person.

One dataset, :data:`DATASET`, at the three stages, in the bring-your-own label format (``docs/formats.md``),
linked by the keys of :mod:`personagap.linking`:

* stage 1: an extractor (:data:`EXTRACTOR`) found each sample user's attributes; a sample annotator rejects each
  one (``bad``) with probability ``P_BAD``, is ``unsure`` with ``P_UNSURE``; a sample LLM verifier judges them too;
* stage 2: for each prompt, the annotator calls each attribute relevant with ``P_RELEVANT``; the pipeline's
  selector (:data:`SELECTOR`, a ``system`` rater) selects a relevant one with ``SEL_IF_RELEVANT``, another with
  ``SEL_IF_IRRELEVANT``; a sample LLM relevance labeller answers too (it is a selector of its own);
* stage 3: a generator (:data:`GENERATOR`) answers each prompt from the selector's choice (``pipeline``) and from
  the annotator's (``oracle``); each answer is paired with the generic one, the personalised side drawn per pair;
  the annotator judges the personalised answer no better than the generic one with ``NO_BETTER[condition]``
  (of which a share ``WORSE_GIVEN_NO_BETTER`` prefers the generic answer, the rest are ties); a sample LLM judge
  (with a confidence) prefers the personalised answer with ``JUDGE_PREFERS_PERSONALISED``.

Attributes flow to stage 2 whatever the annotator said at stage 1 (the pipeline does not know), so some answers
are written from an attribute people rejected at stage 1 or judged irrelevant for the prompt at stage 2: the
planted over-personalised answers. :func:`planted_pipeline_truth` returns the generating rates, the rates the
drawn labels realise (what a point estimate must equal) and the over-personalised answers' ids.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personagap.labels_api import import_labels
from personagap.linking import InputCondition
from personagap.records import Stage
from personagap.sample_data import ATTRIBUTE_TEXTS, PROMPT_TEXTS

DATASET = "sample-pipeline"
EXTRACTOR, SELECTOR, GENERATOR = "sample-extractor", "sample-selector", "sample-writer"
ANNOTATOR = "sample-annotator"
LLM_JUDGE = "sample-llm-judge"
N_USERS, ATTRIBUTES_PER_USER, PROMPTS_PER_USER = 30, 5, 2
"""Thirty sample users: enough for every planted rate's user-clustered CI to be informative."""
SEED = 22

P_BAD, P_UNSURE = 0.2, 0.1
P_RELEVANT, SEL_IF_RELEVANT, SEL_IF_IRRELEVANT = 0.3, 0.8, 0.45
NO_BETTER: dict[InputCondition, float] = {"pipeline": 0.7, "oracle": 0.3}
WORSE_GIVEN_NO_BETTER = 0.6
LLM_OK_IF_BAD, LLM_OK_IF_OK = 0.6, 0.95
"""The sample LLM verifier accepts most attributes, rejected ones included (it is lenient)."""
LLM_YES_IF_RELEVANT, LLM_YES_IF_IRRELEVANT = 0.9, 0.5
JUDGE_PREFERS_PERSONALISED = 0.85
FILES: dict[Stage, str] = {"extraction": "pipeline_extraction.jsonl", "relevance": "pipeline_relevance.jsonl",
         "response": "pipeline_answers.jsonl"}


@dataclass(frozen=True)
class PlantedRate:
    """One planted failure share of one system: the rate the labels were drawn at, and the drawn labels' share."""

    stage: int
    system: str
    quantity: str
    rate: float
    realised: float
    input_condition: str | None = None
    n_users: int = N_USERS


@dataclass(frozen=True)
class PlantedTruth:
    """What :func:`write_sample_pipeline` planted (see the module docstring)."""

    dataset: str
    rates: list[PlantedRate]
    over_personalised: frozenset[str]
    """Source ids (the file's ``item_id``, stored as ``payload.source_id``) of the stage-3 answers written from an
    attribute the annotator rejected at stage 1 or judged irrelevant for that prompt at stage 2."""
    files: dict[Stage, Path] = field(default_factory=dict)
    """Stage -> the file written for it (empty from :func:`planted_pipeline_truth` alone)."""

    def rate(self, quantity: str, system: str, input_condition: str | None = None) -> PlantedRate:
        """The planted rate of ``quantity`` for ``system`` (and ``input_condition`` at stage 3)."""
        return next(r for r in self.rates if (r.quantity, r.system, r.input_condition)
                    == (quantity, system, input_condition))


def planted_pipeline_truth(seed: int = SEED) -> PlantedTruth:
    """The planted truth of the sample pipeline drawn with ``seed`` (no file is written)."""
    truth, _ = _draw(seed)
    return truth


def write_sample_pipeline(dest: str | Path, seed: int = SEED) -> PlantedTruth:
    """Write the three stages' label files under ``dest`` and return what they plant.

    Import them with ``personagap import labels FILE --stage STAGE --dataset sample-pipeline`` (one call per
    stage), or :func:`import_sample_pipeline`.

    Args:
        dest: Folder to create; existing sample files are overwritten.
        seed: Seed of the generator.
    """
    truth, rows = _draw(seed)
    root = Path(dest)
    root.mkdir(parents=True, exist_ok=True)
    files: dict[Stage, Path] = {}
    for stage, name in FILES.items():
        path = root / name
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows[stage]), encoding="utf-8")
        files[stage] = path
    return PlantedTruth(dataset=truth.dataset, rates=truth.rates, over_personalised=truth.over_personalised,
                        files=files)


def import_sample_pipeline(dest: str | Path, db: str | Path, seed: int = SEED) -> PlantedTruth:
    """Write the sample pipeline under ``dest`` and import its three stages into ``db`` (dataset :data:`DATASET`)."""
    truth = write_sample_pipeline(dest, seed)
    for stage, path in truth.files.items():
        import_labels(path, stage=stage, dataset=DATASET, db=db)
    return truth


def _share(hits: int, total: int) -> float:
    return hits / total if total else float("nan")


def _draw(seed: int) -> tuple[PlantedTruth, dict[Stage, list[dict[str, Any]]]]:
    """The label rows of every stage and what they plant, from one seeded stream."""
    rng = random.Random(seed)
    rows: dict[Stage, list[dict[str, Any]]] = {stage: [] for stage in FILES}
    count = {k: 0 for k in ("attrs", "bad", "unsure", "llm_bad", "pairs", "relevant", "selected", "sel_irrelevant",
                            "missed", "llm_selected", "llm_irrelevant", "llm_missed")}
    answers = {c: [0, 0, 0] for c in NO_BETTER}  # condition -> [answers, no better, worse]
    judged = {c: [0, 0] for c in NO_BETTER}  # condition -> [answers, judge says no better]
    flagged: set[str] = set()
    for u in range(1, N_USERS + 1):
        user = f"sample-user-{u:02d}"
        texts = rng.sample(ATTRIBUTE_TEXTS, ATTRIBUTES_PER_USER)
        ids = [f"{user}-attr-{k}" for k in range(ATTRIBUTES_PER_USER)]
        verdict: dict[str, str] = {}
        for aid, text in zip(ids, texts, strict=True):
            roll = rng.random()
            verdict[aid] = "bad" if roll < P_BAD else "unsure" if roll < P_BAD + P_UNSURE else "ok"
            llm_ok = rng.random() < (LLM_OK_IF_BAD if verdict[aid] == "bad" else LLM_OK_IF_OK)
            context = {"user_id": user, "attribute": text, "attribute_id": aid, "system": EXTRACTOR,
                       "conversation": f"[sample conversation of {user}]"}
            rows["extraction"] += [{"item_id": f"s1/{aid}", "rater": ANNOTATOR, "label": verdict[aid], **context},
                                   {"item_id": f"s1/{aid}", "user_id": user, "rater": LLM_JUDGE, "rater_kind": "llm",
                                    "label": "ok" if llm_ok else "bad"}]
            count["attrs"] += 1
            count["bad"] += verdict[aid] == "bad"
            count["unsure"] += verdict[aid] == "unsure"
            count["llm_bad"] += not llm_ok
        for prompt in rng.sample(PROMPT_TEXTS, PROMPTS_PER_USER):
            relevant, selected = [], []
            for aid, text in zip(ids, texts, strict=True):
                rel = rng.random() < P_RELEVANT
                sel = rng.random() < (SEL_IF_RELEVANT if rel else SEL_IF_IRRELEVANT)
                llm = rng.random() < (LLM_YES_IF_RELEVANT if rel else LLM_YES_IF_IRRELEVANT)
                iid = f"s2/{aid}/{PROMPT_TEXTS.index(prompt)}"
                rows["relevance"] += [
                    {"item_id": iid, "user_id": user, "rater": ANNOTATOR, "label": "yes" if rel else "no",
                     "prompt": prompt, "attribute": text, "attribute_id": aid},
                    {"item_id": iid, "user_id": user, "rater": SELECTOR, "rater_kind": "system",
                     "label": "yes" if sel else "no"},
                    {"item_id": iid, "user_id": user, "rater": LLM_JUDGE, "rater_kind": "llm",
                     "label": "yes" if llm else "no"}]
                relevant += [aid] if rel else []
                selected += [aid] if sel else []
                count["pairs"] += 1
                count["relevant"] += rel
                count["selected"] += sel
                count["sel_irrelevant"] += sel and not rel
                count["missed"] += rel and not sel
                count["llm_selected"] += llm
                count["llm_irrelevant"] += llm and not rel
                count["llm_missed"] += rel and not llm
            inputs: tuple[tuple[InputCondition, list[str]], ...] = (("pipeline", selected), ("oracle", relevant))
            for condition, used in inputs:
                iid = f"s3/{user}/{PROMPT_TEXTS.index(prompt)}/{condition}"
                rows["response"] += _pair(rng, iid, user, prompt, condition, [texts[ids.index(a)] for a in used],
                                          used, answers[condition], judged[condition])
                if any(verdict[a] == "bad" or a not in relevant for a in used):
                    flagged.add(iid)
    rates = _rates(count, answers, judged)
    return PlantedTruth(dataset=DATASET, rates=rates, over_personalised=frozenset(flagged)), rows


def _pair(rng: random.Random, iid: str, user: str, prompt: str, condition: InputCondition, used_texts: list[str],
          used: list[str], answers: list[int], judged: list[int]) -> list[dict[str, Any]]:
    """One generic-vs-personalised pair's rows: the annotator's verdict and the LLM judge's, with its confidence."""
    side = "A" if rng.random() < 0.5 else "B"
    generic_side = "B" if side == "A" else "A"
    personalised = f"[sample answer by {GENERATOR} to: {prompt} Written from: {' '.join(used_texts) or 'nothing'}]"
    generic = f"[sample generic answer to: {prompt}]"
    a, b = (personalised, generic) if side == "A" else (generic, personalised)
    no_better = rng.random() < NO_BETTER[condition]
    worse = no_better and rng.random() < WORSE_GIVEN_NO_BETTER
    human = generic_side if worse else "tie" if no_better else side
    judge_personalised = rng.random() < JUDGE_PREFERS_PERSONALISED
    answers[0] += 1
    answers[1] += no_better
    answers[2] += worse
    judged[0] += 1
    judged[1] += not judge_personalised
    return [{"item_id": iid, "user_id": user, "rater": ANNOTATOR, "label": human, "prompt": prompt,
             "response_a": a, "response_b": b, "personalized": side, "attributes_used": used,
             "input_condition": condition, "system": GENERATOR},
            {"item_id": iid, "user_id": user, "rater": LLM_JUDGE, "rater_kind": "llm",
             "label": side if judge_personalised else generic_side,
             "confidence": round(rng.uniform(0.55, 0.95), 2), "confidence_scale": "0-1"}]


def _rates(count: dict[str, int], answers: dict[InputCondition, list[int]],
           judged: dict[InputCondition, list[int]]) -> list[PlantedRate]:
    """Generating and realised rates of every planted quantity (pooled over items; users are equal-sized)."""
    p_sel = P_RELEVANT * SEL_IF_RELEVANT + (1 - P_RELEVANT) * SEL_IF_IRRELEVANT
    p_llm = P_RELEVANT * LLM_YES_IF_RELEVANT + (1 - P_RELEVANT) * LLM_YES_IF_IRRELEVANT
    out = [
        PlantedRate(1, EXTRACTOR, "rejected_attributes", P_BAD, _share(count["bad"], count["attrs"])),
        PlantedRate(1, EXTRACTOR, "unsure_attributes", P_UNSURE, _share(count["unsure"], count["attrs"])),
        PlantedRate(1, LLM_JUDGE, "judge_rejected_attributes", P_BAD * (1 - LLM_OK_IF_BAD)
                    + (1 - P_BAD) * (1 - LLM_OK_IF_OK), _share(count["llm_bad"], count["attrs"])),
    ]
    for system, selected, irrelevant, missed, p in (
            (SELECTOR, "selected", "sel_irrelevant", "missed", (p_sel, SEL_IF_IRRELEVANT, SEL_IF_RELEVANT)),
            (LLM_JUDGE, "llm_selected", "llm_irrelevant", "llm_missed",
             (p_llm, LLM_YES_IF_IRRELEVANT, LLM_YES_IF_RELEVANT))):
        p_selected, if_irrelevant, if_relevant = p
        out += [
            PlantedRate(2, system, "irrelevant_selected", (1 - P_RELEVANT) * if_irrelevant / p_selected,
                        _share(count[irrelevant], count[selected])),
            PlantedRate(2, system, "missed_relevant", 1 - if_relevant, _share(count[missed], count["relevant"])),
            PlantedRate(2, system, "over_selection", p_selected / P_RELEVANT,
                        _share(count[selected], count["relevant"])),
        ]
    for condition, (n, no_better, worse) in answers.items():
        out += [
            PlantedRate(3, GENERATOR, "no_better_than_generic", NO_BETTER[condition], _share(no_better, n),
                        condition),
            PlantedRate(3, GENERATOR, "worse_than_generic", NO_BETTER[condition] * WORSE_GIVEN_NO_BETTER,
                        _share(worse, n), condition),
            PlantedRate(3, LLM_JUDGE, "judge_no_better_than_generic", 1 - JUDGE_PREFERS_PERSONALISED,
                        _share(judged[condition][1], judged[condition][0]), condition),
        ]
    return out
