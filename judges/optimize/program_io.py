"""Saved programs: DSPy's JSON state plus a sidecar; loading one back as a judge, and judging with it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import dspy

from personagap.analysis.comparable import IN_SAMPLE
from personagap.judges.base import Judge, JudgeTask, Program, get_judge
from personagap.judges.lm import LMConfig
from personagap.judges.optimize.data import Example, OptimizeError, UserSplit, data_fingerprint, load_examples
from personagap.judges.optimize.report import OptimizeResult, OptimizeSettings, sidecar_path
from personagap.judges.optimize.scoring import program_demos, program_id
from personagap.judges.runner import run_judge
from personagap.store import StoreError, git_sha, now

SIDECAR_FORMAT = "personagap-optimized-judge"
SIDECAR_VERSION = 1


def save_program(program: dspy.Module, out: str | Path, judge: Judge, settings: OptimizeSettings, lm: LMConfig,
                 split: UserSplit, examples: Sequence[Example], result: OptimizeResult) -> Path:
    """Write the program (DSPy's JSON state) and its sidecar; return the sidecar's path."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path))
    meta = {
        "format": SIDECAR_FORMAT, "format_version": SIDECAR_VERSION, "program_id": program_id(program, judge),
        "base_judge": judge.name, "judge_version": judge.version, "stage": judge.stage,
        "optimizer": settings.optimizer, "metric": settings.metric, "budget": settings.budget,
        "max_items": settings.max_items,
        "split_seed": split.seed, "swap_seed": settings.seed,
        "users": {"train": list(split.train), "dev": list(split.dev), "test": list(split.test)},
        "datasets": list(settings.datasets) if settings.datasets else None,
        "data_fingerprint": data_fingerprint(examples), "model": lm.model, "lm": lm.public(),
        "scores": result.scores(),
        "calls": {"by_phase": result.calls, "cache_hits": result.cache_hits, "cost": result.cost,
                  "budget_exhausted": result.budget_exhausted},
        "created_at": now().isoformat(), "git_sha": git_sha(),
    }
    side = sidecar_path(path)
    side.write_text(json.dumps(meta, indent=2, ensure_ascii=False))
    return side


@dataclass(frozen=True)
class SavedProgram:
    """A program loaded back: its judge (a new version of the base judge) and its sidecar."""

    judge: Judge
    meta: dict[str, Any]

    @property
    def in_sample_users(self) -> frozenset[str]:
        """Users whose items shaped the program (train and dev): its labels on them are in-sample."""
        users = self.meta["users"]
        return frozenset(users["train"]) | frozenset(users["dev"])


class ProgramJudge(Judge):
    """A base judge plus an optimised program's instructions and demonstrations (built by :func:`program_judge`)."""

    program_demos: ClassVar[tuple[dict[str, Any], ...]] = ()

    def demos(self) -> list[dict[str, Any]]:
        """The program's demonstrations, in the order DSPy puts them before each call."""
        return [dict(d) for d in self.program_demos]

    def program(self) -> Program:
        """The runner's prompt recipe: this program's signature (instructions) and demos (all in its cache key)."""
        return Program(self.signature, tuple(self.demos()))


def program_judge(base: Judge, program: dspy.Module) -> Judge:
    """The judge a program defines: the base judge's parser, the program's signature and demos.

    Its name is ``<base>@<program id>``, so it is a rater of its own and its cached answers are keyed by
    the program's content (instructions and demos) through the name.
    """
    (predictor,) = program.predictors()
    fields = set(base.signature.fields)
    demos = tuple({k: v for k, v in d.items() if k in fields} for d in program_demos(program))
    cls = type(f"Program{type(base).__name__}", (ProgramJudge, type(base)), {
        "name": f"{base.name}@{program_id(program, base)}", "signature": predictor.signature,
        "program_demos": demos, "__module__": __name__})
    judge: Judge = cls()
    return judge


def load_program(path: str | Path) -> SavedProgram:
    """Load a program saved by :func:`optimize` and check its sidecar.

    Raises:
        OptimizeError: No program or sidecar, a sidecar of another format, or a program whose content
            does not match its sidecar.
    """
    path = Path(path)
    side = sidecar_path(path)
    if not path.is_file():
        raise OptimizeError(f"{path}: no such program file")
    if not side.is_file():
        raise OptimizeError(f"{side}: the program's sidecar is missing (it is written beside the program)")
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError) as exc:
        raise OptimizeError(f"{side}: not a readable JSON sidecar ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != SIDECAR_FORMAT:
        raise OptimizeError(f"{side}: field 'format': not a {SIDECAR_FORMAT} sidecar")
    if int(meta.get("format_version", 0)) > SIDECAR_VERSION:
        raise OptimizeError(f"{side}: field 'format_version': {meta.get('format_version')} is newer than this "
                            f"PersonaGap reads ({SIDECAR_VERSION})")
    try:
        base = get_judge(str(meta["base_judge"]))
        program = dspy.Predict(base.signature)
        program.load(str(path))
    except (KeyError, ValueError, OSError) as exc:
        raise OptimizeError(f"{path}: cannot load the program ({str(exc).splitlines()[0][:200]})") from None
    if program_id(program, base) != meta.get("program_id"):
        raise OptimizeError(f"{path}: field 'program_id': the program's instructions/demos do not match its "
                            f"sidecar ({meta.get('program_id')}); re-run optimize")
    return SavedProgram(program_judge(base, program), meta)


def program_tasks(saved: SavedProgram, tasks: Sequence[JudgeTask], users: Mapping[str, str]) -> list[JudgeTask]:
    """The judge's tasks, with condition :data:`IN_SAMPLE` on items of the program's own train/dev users.

    Args:
        saved: The loaded program.
        tasks: The base judge's tasks (one target item each).
        users: item id -> user id.
    """
    inside = saved.in_sample_users
    return [replace(t, condition=IN_SAMPLE) if users.get(t.targets[0]) in inside else t for t in tasks]


def judge_with_program(db: str | Path, program_path: str | Path, lm: LMConfig, *,
                       datasets: tuple[str, ...] | None = None, concurrency: int = 8, limit: int | None = None,
                       max_retries: int = 4, progress: bool = True) -> Any:
    """Run a saved program as a judge over the stored items (``judge relevance|response --program``).

    Labels on the program's train/dev users are stored under condition ``in-sample`` (kept out of every
    comparison); the rest under the base judge's usual condition. Pairwise items are shown in the A/B order
    the optimiser showed them (the sidecar's ``swap_seed``), so the labels stored for the test users are the
    answers its "after" figures were computed from.

    Returns:
        The runner's :class:`~personagap.judges.summary.RunSummary`.
    """
    saved = load_program(program_path)
    # Sidecars written before swap_seed was recorded: the optimiser drew its swaps with the split seed.
    swap_seed = int(saved.meta.get("swap_seed", saved.meta.get("split_seed", 0)))
    _, tasks, items = load_examples(db, saved.judge, datasets=datasets or _datasets(saved), seed=swap_seed)
    if not tasks:
        raise StoreError(f"{db}: no items for judge {saved.meta['base_judge']}; import a release first")
    users = dict(zip(items["item_id"].astype(str), items["user_id"].astype(str), strict=True))
    return run_judge(db, saved.judge, program_tasks(saved, tasks, users), lm, concurrency=concurrency, limit=limit,
                     max_retries=max_retries, progress=progress, source=f"program:{saved.meta['program_id']}")


def _datasets(saved: SavedProgram) -> tuple[str, ...] | None:
    found = saved.meta.get("datasets")
    return tuple(found) if found else None
