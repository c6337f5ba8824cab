"""Clients of JobService: the typed SDK, the ops CLI jobsctl and the web backend."""
