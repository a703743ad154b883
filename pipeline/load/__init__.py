"""The load: an image of N tables planned in one source snapshot, extracted, committed in one lake
transaction and checked by identity (run, plan, proof); and what keeps the lake equal to its
source afterwards (reconcile, repair). Preflight checks what a load would fail on, first."""
