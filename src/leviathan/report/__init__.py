"""Reporting: the paper's tables and figures from the evaluation outputs, beside the paper's reported numbers, and the audit of every number."""
