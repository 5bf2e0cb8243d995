"""Reporting: tables (and, with issue 7, figures and the paper comparison) from eval results."""
