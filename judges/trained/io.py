"""Saving and loading trained models: a joblib pickle plus a readable JSON sidecar that must agree with it.

A pickle runs code when loaded: load only models you trained or trust.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import joblib
import sklearn

from personagap import __version__
from personagap.judges.trained.models import TrainedModel
from personagap.judges.trained.specs import TrainedKind

FORMAT_VERSION = 2
"""Version of the saved-model layout (bump when :class:`TrainedModel`'s fields change)."""


# --------------------------------------------------------------------------- save / load

def save_model(model: TrainedModel, path: str | Path) -> Path:
    """Write ``path`` (joblib) and ``path.json`` (metadata sidecar); return the sidecar's path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model.metadata.setdefault("saved_at", datetime.now(UTC).isoformat(timespec="seconds"))
    meta = sidecar(model)
    joblib.dump(model, path, compress=3)
    side = sidecar_path(path)
    side.write_text(json.dumps(meta, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    return side


def sidecar_path(path: str | Path) -> Path:
    """Where the JSON metadata of a model file lives."""
    path = Path(path)
    return path.with_name(path.name + ".json")


def sidecar(model: TrainedModel) -> dict[str, Any]:
    """The JSON-safe metadata written beside a model."""
    return {"format_version": FORMAT_VERSION, "kind": model.kind, "judge": model.judge, "version": model.version,
            "threshold": model.threshold, "personagap": __version__, "scikit_learn": sklearn.__version__,
            **model.metadata}


def load_model(path: str | Path, kind: TrainedKind | None = None) -> TrainedModel:
    """Load a model saved by :func:`save_model`, checking its sidecar and (optionally) its kind.

    Raises:
        FileNotFoundError: No model or no sidecar at ``path``.
        ValueError: The sidecar and the model disagree, the format is newer, or the kind is wrong.
    """
    path = Path(path)
    side = sidecar_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file (train one: personagap train {kind or 'relevance'} "
                                f"--out {path})")
    if not side.is_file():
        raise FileNotFoundError(f"{side}: the model's metadata sidecar is missing")
    meta = json.loads(side.read_text(encoding="utf-8"))
    if int(meta.get("format_version", 0)) > FORMAT_VERSION:
        raise ValueError(f"{path}: model format {meta.get('format_version')} is newer than this PersonaGap reads")
    model = joblib.load(path)
    if not isinstance(model, TrainedModel):
        raise ValueError(f"{path}: not a PersonaGap trained model")
    if meta.get("model_id") != model.metadata.get("model_id") or meta.get("kind") != model.kind:
        raise ValueError(f"{path}: model and sidecar {side.name} disagree (kind/model_id); re-save the model")
    if kind is not None and model.kind != kind:
        raise ValueError(f"{path}: a {model.kind} model, but a {kind} model is needed here")
    return model
