"""Bring-your-own-data commands: `import labels`, `import parquet`, `export` (issue 14)."""
