"""The pipeline's stage names, in a module that imports nothing heavy (the CLI's ``--help`` lists them)."""

from __future__ import annotations

from typing import Literal, get_args

Stage = Literal["extraction", "relevance", "response"]
STAGES: tuple[Stage, ...] = get_args(Stage)
"""Every stage, in pipeline order: attribute extraction, relevance selection, response judgment."""
