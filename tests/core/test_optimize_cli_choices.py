"""`personagap optimize` offers exactly what the optimiser accepts.

The command spells its choices out (importing the optimiser would load DSPy at every CLI start), so this test
is what keeps the two lists from drifting apart.
"""

from __future__ import annotations

import click

from personagap.cli import cli
from personagap.commands import optimize as command
from personagap.judges.optimize import OPTIMIZERS, SELECTION_METRICS, STAGE_JUDGES


def _choices(name: str) -> tuple[str, ...]:
    opt = cli.commands["optimize"]
    (param,) = [p for p in opt.params if p.name == name]
    assert isinstance(param.type, click.Choice)
    return tuple(param.type.choices)


def test_optimize_command_offers_the_optimisers_own_choices() -> None:
    assert _choices("optimizer") == OPTIMIZERS
    assert _choices("metric") == SELECTION_METRICS
    assert _choices("stage") == tuple(STAGE_JUDGES)
    assert sorted(_choices("judge_name")) == sorted(j for judges in STAGE_JUDGES.values() for j in judges)


def test_default_judge_of_a_stage_can_be_optimised_for_it() -> None:
    assert set(command.DEFAULT_JUDGE) == set(STAGE_JUDGES)
    for stage, judge in command.DEFAULT_JUDGE.items():
        assert judge in STAGE_JUDGES[stage]
