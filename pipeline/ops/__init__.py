"""Operating the pipeline: its lifetime (Pipeline), the long-running process (scheduler, observe,
health, metrics, web, dashboard) and the commands (status, doctor, demo). The load itself is
pipeline.load."""
