"""The only layer that calls an LLM: judges (signature + parser) and the runner that executes them."""

# Importing the judge modules registers every judge in JUDGES.
from personagap.judges import extraction, relevance, response  # noqa: F401
from personagap.judges.base import JUDGES, Judge, JudgeTask, Verdict, get_judge, register_judge

__all__ = ["JUDGES", "Judge", "JudgeTask", "Verdict", "get_judge", "register_judge"]
