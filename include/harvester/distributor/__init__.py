"""Intake queues, admission against the global rate-limit store, leases, retries and dead letters."""
