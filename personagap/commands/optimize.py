"""`personagap optimize`: DSPy optimisation of a judge toward human agreement (issue 16)."""
