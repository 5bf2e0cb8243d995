"""Leviathan: reference reproduction pipeline for arXiv 2601.22040.

LEV, a small continuous generator of input embeddings, replaces the V x D input table,
and the output head is a full, untied D x V matrix. See README.md.
"""

__version__ = "0.1.0"
