"""What operators see: one snapshot of the harvest for the page, its JSON API and the metrics."""
