"""Dashboard page: Overview (a Streamlit page script; the logic lives in render.py)."""

from personagap.dashboard import render

render.overview()
