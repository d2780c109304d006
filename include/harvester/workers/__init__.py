"""The Celery app, its queues and the thin tasks that run scraping work."""
