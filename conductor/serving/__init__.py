"""The trained Conductor behind an OpenAI-compatible endpoint, without Ray (cluster/serve.py deploys it on
Ray Serve; ``python -m cluster.serve --standalone`` runs it in one process)."""
