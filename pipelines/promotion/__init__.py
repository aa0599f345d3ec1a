"""The promotion gate as a library; `pipelines.promote` is the stage that runs it.

- `gate`: the decision on numbers only (scores, references, thresholds, verdict); no I/O.
- `scoring`: the scores it decides on: the `evaluate` stage's figures where they are the gate's runs, else runs.
- `ledger`: the deployment records under `data/deployments/`: write, publish, roll back.
- `confirmation`: the check, in a separate process, that a scheduler runs the deployed version.
- `report`: the decision document, the terminal table, the outcome line, the MLflow run and version tags.
"""
