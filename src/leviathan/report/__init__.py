"""Reporting: the paper's tables and figures from the evaluation outputs, beside the paper's figures, and the audit of every number."""
