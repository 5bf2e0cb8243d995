# Report (tables, figures, paper comparison): see issue 7.
