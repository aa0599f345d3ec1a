"""The dl2 lifecycle, one module per stage; each has `run(...)` and runs as `python -m pipelines.<stage>`.

DVC stages (`dvc.yaml`) and Airflow tasks (`dags/`) both call these. Only here do MLflow, Great Expectations
and DVC appear; the `dl2` library does the work.
"""
