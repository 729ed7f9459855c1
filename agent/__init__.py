"""Airboard GPU node agent: samples NVML every second and posts batches to the site's HTTP API.

Runs on a GPU node with only `nvidia-ml-py` installed (see `requirements-agent.txt`); it never
imports Django, Celery or kombu, and holds no broker credentials: its configuration is the
site's URL (AIRBOARD_URL) and its team's ingest key (AIRBOARD_AGENT_KEY).
`python -m agent --help` lists the options.
"""

PAYLOAD_VERSION = 1
