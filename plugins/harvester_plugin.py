"""The Harvester plugin for Airflow 3: the Harvester page, the Harvest progress tab and their JSON API.

Declares only: the app, its routes and views live in harvester.airflow.plugin.
"""

from harvester.airflow.plugin import HarvesterPlugin

__all__ = ["HarvesterPlugin"]
