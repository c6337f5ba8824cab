"""jobsctl: the operators' command line for JobService (see ``jobsctl --help``)."""
