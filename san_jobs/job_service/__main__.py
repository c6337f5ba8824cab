"""``python -m san_jobs.job_service``: the same as the ``job-service`` command."""

from san_jobs._console_scripts import job_service

job_service()
