"""Streamlit dashboard over the DuckDB store (read-only)."""
