"""Fast, honest imports: a simulation or comparison of heuristics loads no torch, gymnasium or MLflow, and a rollout
worker serving the NumPy/numba policy loads no torch (each check runs in a fresh interpreter and reads
`sys.modules` after the work is done); and every third-party module imported anywhere is pinned."""

from __future__ import annotations

import ast
import importlib.metadata
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "gymnasium", "mlflow", "airflow", "kubernetes", "great_expectations", "dvc")


def loaded_after(script: str, cwd: Path) -> set[str]:
    """Top-level packages of `HEAVY` in `sys.modules` once `script` has run in a fresh interpreter."""
    probe = f"{script}\nimport sys\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))


def command(*arguments: str) -> str:
    return (
        "import sys\nfrom dl2.cli.main import main\n"
        f"sys.argv = ['dl2', *{list(arguments)!r}]\n"
        "try:\n    main()\nexcept SystemExit as done:\n    assert done.code in (0, None), done.code\n"
    )


@pytest.mark.parametrize(
    "arguments",
    [
        ("simulate", "--workload", "dl2-official-small", "--scheduler", "drf", "--mode", "compat", "--json"),
        ("simulate", "--workload", "synthetic-small", "--scheduler", "optimus-fitted", "--json"),
        ("compare", "--workload", "authors-tiny", "--mode", "compat", "--schedulers", "drf,fifo", "--out", "out"),
    ],
    ids=["simulate-compat", "simulate-realistic", "compare"],
)
def test_heuristics_load_no_heavy_package(arguments: tuple[str, ...], tmp_path: Path) -> None:
    assert loaded_after(command(*arguments), tmp_path) == set()


def test_a_rollout_worker_loads_no_torch(tmp_path: Path) -> None:
    """What a Ray or process-pool worker receives: a pickled task holding the policy as NumPy arrays."""
    from dl2.env.config import EnvConfig
    from dl2.env.observation import ObservationConfig
    from dl2.rl.config import NetworkConfig
    from dl2.rl.inference import NumpyPolicy
    from dl2.rl.networks import PolicyNetwork
    from dl2.rl.rollout import EpisodeTask

    observation = ObservationConfig(window=10)
    network = NetworkConfig(hidden=(16,), kind="per-job-local")
    state = PolicyNetwork(observation.shape, network).state_dict()
    policy = NumpyPolicy.from_state_dict(state, observation.shape, network)
    task = EpisodeTask(policy, EnvConfig(observation=observation, max_slots=30), "authors-tiny", 1, 2)
    (tmp_path / "task.pickle").write_bytes(pickle.dumps(task))
    script = (
        "import pickle\nfrom dl2.rl.workers import run_episode\n"
        "episode = run_episode(pickle.loads(open('task.pickle', 'rb').read()))\n"
        "assert episode.num_decisions > 0\n"
    )
    assert loaded_after(script, tmp_path) <= {"gymnasium"}  # the environment is a Gymnasium env; no torch


ROOT = Path(__file__).resolve().parents[3]
IMPORTED_BY = ("dl2", "testbed", "pipelines", "dags", "tests", "benchmarks", "docs", "tools")
PROVIDED_BY = {"airflow": "apache-airflow"}
"""Import names whose distributions are installed through a declared meta-package."""


def _distribution(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_third_party_import_is_declared_in_the_pins():
    """A module the code imports comes from a distribution that requirements.txt or dev.txt names, not from one
    that merely happens to be installed as something else's dependency (which a new version may drop)."""
    declared = set()
    for name in ("requirements.txt", "dev.txt"):
        for line in (ROOT / "requirements" / name).read_text().splitlines():
            requirement = line.split("#")[0].strip()
            if requirement:
                declared.add(_distribution(re.split(r"[=<>\[ ;]", requirement)[0]))
    providers = importlib.metadata.packages_distributions()
    local = {path.stem for folder in IMPORTED_BY for path in (ROOT / folder).rglob("*.py")} | set(IMPORTED_BY)
    undeclared: dict[str, str] = {}
    for folder in IMPORTED_BY:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name.split(".")[0] for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module.split(".")[0]]
                else:
                    continue
                for name in names:
                    if name in sys.stdlib_module_names or name in local or name == "__future__":
                        continue
                    dists = {_distribution(d) for d in providers.get(name, [])} | {PROVIDED_BY.get(name, name)}
                    if not dists & declared:
                        undeclared.setdefault(name, str(path.relative_to(ROOT)))
    assert undeclared == {}, f"imported but not pinned in requirements/ (module: first file): {undeclared}"
