"""Prometheus metrics: what workers record in Redis, and the collector the distributor serves."""
