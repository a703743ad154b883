"""Operating the pipeline: one run, the scheduler, status, and the demo."""
