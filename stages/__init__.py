"""The three pipeline stages PersonaGap diagnoses, and what each compares.

Each stage's report is built from the store (``report_relevance``, ``report_extraction``, ``report_response`` in
its module); importing this package imports no stage, so one stage's command does not pay for the others.
"""
