"""Harvester: harvest structured data from many websites on a schedule.

The package is the installable core shared by the DAG files, the Celery workers, the distributor
service, the Airflow plugin and the tests. Nothing here imports Airflow except the Airflow
adapters in ``harvester.airflow`` (tests/test_layering.py and the import-linter contracts check it).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
