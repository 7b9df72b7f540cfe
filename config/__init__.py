"""Settings and client factories shared by the job, the CLI, the HTTP API and the periodic jobs.

Neutral ground: nothing here imports the CLI (``lb``), so the streaming job
and the API server depend on the settings without depending on the command line.
"""
