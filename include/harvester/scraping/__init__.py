"""Fetching (HTTP and browser), extraction into typed records, link discovery and URL canonicalisation."""
