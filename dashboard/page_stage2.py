"""Dashboard page: Stage 2 (a Streamlit page script; the logic lives in render.py)."""

from personagap.dashboard import render

render.stage_page("relevance")
