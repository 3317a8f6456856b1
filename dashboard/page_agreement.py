"""Dashboard page: Agreement matrix (a Streamlit page script; the logic lives in render.py)."""

from personagap.dashboard import render

render.agreement_matrix()
