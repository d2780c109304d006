"""Airflow DAG ``page_slots``: every minute, allocate, prepare and close browser page slots per country.

Declares only: the DAG is built by harvester.airflow.page_slots, the jobs live in harvester.pageslots.
"""

from harvester.airflow.page_slots import build_page_slots_dag

dag = build_page_slots_dag()
