"""``python -m san_jobs.jobsctl``: the same as the ``jobsctl`` command."""

from san_jobs._console_scripts import jobsctl

jobsctl()
