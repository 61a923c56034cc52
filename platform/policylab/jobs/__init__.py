"""Jobs: Celery tasks that submit, watch, cancel, retry and resume Ray jobs for runs."""
