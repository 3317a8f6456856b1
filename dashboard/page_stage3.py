"""Dashboard page: Stage 3 (a Streamlit page script; the logic lives in render.py)."""

from personagap.dashboard import render

render.stage_page("response")
