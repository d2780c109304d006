"""Harvester: harvest structured data from many websites on a schedule.

The package is the installable core shared by the DAG files, the Celery workers, the distributor
service, the Airflow plugin and the tests. Nothing here imports Airflow unless it is an Airflow
adapter (modules named ``airflow_*``).
"""

__version__ = "0.1.0"
