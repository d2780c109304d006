"""What operators see: the figures of the Harvester page and its JSON API (the Airflow plugin serves them)."""
