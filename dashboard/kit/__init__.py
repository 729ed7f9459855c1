"""The kit both apps import: access, the shared API schemas, CSV, figures, commands, the queue.

Nothing here imports runs/ or billing/ (one `forbidden` contract on this folder, pyproject.toml):
a piece that needs either app's domain belongs in that app.
"""
