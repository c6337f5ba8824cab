"""``python -m san_jobs.ai_gateway``: the same as the ``ai-gateway`` command."""

from san_jobs._console_scripts import ai_gateway

ai_gateway()
