"""Dashboard page: Annotate (a Streamlit page script; the logic lives in annotate.py and annotate_page.py)."""

from personagap.dashboard import annotate_page

annotate_page.annotate_page()
