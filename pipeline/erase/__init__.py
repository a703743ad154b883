"""Erasure (``--erase``): a subject's rows out of the lake, its every retained snapshot, file,
quarantine and catalog table, never to be loaded again, with one receipt per request.

:mod:`.erasure` runs it; :mod:`.subject_rows` finds the subject in rows and payloads by one rule;
:mod:`.column_stats` keeps the catalog's bounds from holding the value; :mod:`.catalog_vacuum`
scrubs the catalog database's pages last.
"""
