"""Which sample of a repeated run a judge run is (``judge --repeats K``), for runs started by a stage's own code.

A stage's judge function (``api.judge_relevance``, ``stages.response.judge_response``, ...) builds its tasks and
calls :func:`personagap.judges.runner.run_judge` itself; :func:`as_sample` makes each of those calls sample ``k`` of
a repeated run (its own rater and cache keys) without the stage passing anything on, so a repeated run judges
exactly the tasks a single run would. An explicit ``run_judge(..., sample=k)`` wins over it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_SAMPLE: ContextVar[int | None] = ContextVar("personagap_judge_sample", default=None)


def current_sample() -> int | None:
    """The sample number set by the innermost :func:`as_sample` (None outside one)."""
    return _SAMPLE.get()


@contextmanager
def as_sample(k: int) -> Iterator[None]:
    """Within this block, every judge run started without an explicit ``sample`` is sample ``k``.

    Raises:
        ValueError: ``k`` below 1.
    """
    if k < 1:
        raise ValueError(f"sample numbers start at 1, got {k}")
    token = _SAMPLE.set(k)
    try:
        yield
    finally:
        _SAMPLE.reset(token)
