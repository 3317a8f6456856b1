"""Adapters that read public human-label releases into PersonaGap records."""

from personagap.human_data._jsonl import DataError
from personagap.human_data.recenter import load_recenter

__all__ = ["DataError", "load_recenter"]
