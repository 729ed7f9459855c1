"""Airboard GPU node agent: samples NVML every second and ships batches to the Celery broker.

Runs on a GPU node with only `nvidia-ml-py` and `celery[redis]` installed (see
`requirements-agent.txt`); it never imports Django. `python -m agent --help` lists the options.
"""

PAYLOAD_VERSION = 1
TASK_NAME = "runs.ingest_agent_batch"
