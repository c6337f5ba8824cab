"""Clients of JobService: the ops CLI jobsctl and the web backend. The typed SDK is
``san_jobs.client``; ``clients.sdk`` is its old, deprecated name."""
