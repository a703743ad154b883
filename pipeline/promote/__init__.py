"""Promotion: one staged batch -> one DuckLake transaction -> at most one snapshot.

:mod:`.promotion` copies or registers a batch with its state row under the promote lock;
:mod:`.zero_copy` is zero-copy's one home: when a batch may skip the copy (decided in the plan),
the lake's side of Spark writing final files, and their registration.
"""
