"""``python -m san_jobs.web``: the same as the ``san-web`` command."""

from san_jobs._console_scripts import san_web

san_web()
