"""`dl2 cluster --real-nodes`: its help says what the real nodes are, and where they cannot run (`make real-nodes`
has not run, or not root) it is refused in one line, exit 2, before anything starts. The nodes themselves, started
by `dl2 cluster`: `tests/integration/kube/test_real_nodes.py`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dl2.cli.cluster import REAL_NODES_HELP, REAL_PREFIX
from testbed.controlplane import nodes
from testbed.controlplane.nodes.layout import MAX_NODES

ROOT = Path(__file__).resolve().parents[3]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
"""A user who is not root and never ran `make real-nodes` (its cache is its own)."""


def test_the_help_names_the_nodes_as_they_are_made() -> None:
    """The help is literal (the CLI does not import the nodes' package to build its parser): it must agree."""
    assert f"at most {MAX_NODES}" in REAL_NODES_HELP
    assert nodes.NODE_LABEL in REAL_NODES_HELP and nodes.HELLO_IMAGE in REAL_NODES_HELP
    assert f"Nodes {REAL_PREFIX}-0" in REAL_NODES_HELP


def test_real_nodes_where_they_cannot_run_are_refused_in_one_line(tmp_path: Path) -> None:
    if nodes.missing():
        prefix: list[str] = []  # this machine lacks them as it is
    elif os.geteuid() == 0 and shutil.which("setpriv"):
        prefix = NOBODY
    else:
        pytest.skip("real nodes can run here, and no other user to be")
    home = tmp_path / "home"
    home.mkdir(mode=0o777)
    kubeconfig = tmp_path / "cluster.kubeconfig"
    environment = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    command = [*prefix, sys.executable, "-m", "dl2.cli.main", "cluster", "--real-nodes", "2"]
    command += ["--kubeconfig", str(kubeconfig)]
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    line = done.stderr.strip()
    assert line.startswith("dl2 cluster: error: --real-nodes: real nodes cannot run here, missing: "), line
    assert "make real-nodes" in line or "root" in line
    assert not kubeconfig.exists(), "refused before anything started"


def test_the_training_operator_without_real_nodes_is_refused_in_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "cluster.kubeconfig"
    command = [sys.executable, "-m", "dl2.cli.main", "cluster", "--training-operator", "--kubeconfig", str(kubeconfig)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "dl2 cluster: error: --training-operator makes pods that run on real nodes: give --real-nodes N too"
    )
    assert not kubeconfig.exists()
