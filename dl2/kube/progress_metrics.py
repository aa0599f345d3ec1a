"""Training progress from the metrics a job already exports, through Prometheus.

A job that does not run `dl2.report` but whose training loop exports its epoch (a Prometheus exporter in the
training code, Lightning's or Hugging Face's metrics pushed to a gateway, a framework's own counter) names a PromQL
query in its annotation `dl2.io/progress-query`, e.g. `max(training_epoch{namespace="team-a",job="bert-7"})`;
the controller, given `--prometheus-url`, evaluates each such query once a slot (the HTTP API's instant query,
`/api/v1/query`, as KEDA's Prometheus scaler and prometheus-adapter do) and takes the largest sample as the
job's epochs done. A query that fails or returns nothing leaves the job at what its annotation
`dl2.io/progress-epochs` says; the failure is logged and counted, never fatal to the slot.
"""

from __future__ import annotations

import json
import logging
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

log = logging.getLogger("dl2.serve")


class QueryError(RuntimeError):
    """Prometheus refused a query or answered something that is not a number."""


@dataclass(frozen=True, slots=True)
class ProgressQuery:
    namespace: str
    name: str
    query: str


def sample_value(body: Mapping[str, object]) -> float | None:
    """The largest sample of an instant query's answer (a scalar or a vector), or None for an empty vector."""
    if body.get("status") != "success":
        raise QueryError(f"{body.get('errorType', 'error')}: {body.get('error', body)}")
    data = body.get("data")
    if not isinstance(data, Mapping):
        raise QueryError("no data in the answer")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        values = [result[1]]
    elif kind == "vector" and isinstance(result, list):
        values = [sample["value"][1] for sample in result if isinstance(sample, Mapping)]
    else:
        raise QueryError(f"a {kind} is not a number of epochs (the query must give a scalar or an instant vector)")
    numbers = [float(value) for value in values]
    finite = [number for number in numbers if math.isfinite(number) and number >= 0]
    return max(finite) if finite else None


class PrometheusProgress:
    """Evaluates the jobs' progress queries against one Prometheus, a few at a time."""

    def __init__(self, url: str, timeout_s: float = 5.0, parallel: int = 8) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.parallel = parallel
        self.failures = 0
        """Queries that failed since start (the controller exports it as a metric)."""

    def query(self, text: str) -> float | None:
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': text})}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout_s) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as error:  # 400/422: a bad query, with Prometheus's reason in the body
            try:
                body = json.loads(error.read())
            except ValueError:
                raise QueryError(f"HTTP {error.code}") from error
        except (OSError, ValueError) as error:
            raise QueryError(str(error)) from error
        return sample_value(body)

    def read(self, queries: Sequence[ProgressQuery]) -> dict[tuple[str, str], float]:
        """(namespace, name) -> epochs done, for the queries that answered with a number."""
        if not queries:
            return {}

        def one(item: ProgressQuery) -> tuple[ProgressQuery, float | None, str | None]:
            try:
                return item, self.query(item.query), None
            except QueryError as error:
                return item, None, str(error)

        with ThreadPoolExecutor(min(self.parallel, len(queries)), thread_name_prefix="dl2-progress") as pool:
            answers = list(pool.map(one, queries))
        progress: dict[tuple[str, str], float] = {}
        for item, value, problem in answers:
            if problem is not None:
                self.failures += 1
                log.warning("progress query of %s/%s failed: %s", item.namespace, item.name, problem)
            elif value is not None:
                progress[(item.namespace, item.name)] = value
        return progress
