"""san-jobs for the programs that use it: `san_jobs.client` is the typed JobService SDK."""
