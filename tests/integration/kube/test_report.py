"""The training-side progress reporter (`dl2.report`): standard library only at import; rank gating, rate limiting,
monotone values, the annotation's format, errors swallowed and counted, the environment a pod gives it; the
Lightning and Hugging Face callbacks through stand-ins for the libraries (neither is installed); and, on the real
control plane, a ServiceAccount bound to `k8s/reporter-rbac.yaml` writing progress on both job kinds, refused
where it is not bound, and the controller's contract reading back what it wrote."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dl2.kube import contract
from dl2.report import PROGRESS_EPOCHS, PYTORCHJOB, VOLCANO_JOB, ProgressReporter, format_epochs, reporter
from dl2.report.callbacks import hf_callback, lightning_callback, lightning_epochs
from dl2.report.target import TargetError, is_rank_zero, job_kind

ROOT = Path(__file__).resolve().parents[3]
LOGGER = "dl2.report.reporter"


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


class FakeApi:
    """Records each PATCH; answers with the next of `answers` (a status, or an exception to raise), then 200."""

    def __init__(self, *answers: int | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, dict[str, Any], dict[str, str]]] = []

    def __call__(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, str]:
        self.calls.append((url, json.loads(body), headers))
        answer = self.answers.pop(0) if self.answers else 200
        if isinstance(answer, Exception):
            raise answer
        message = json.dumps({"kind": "Status", "message": f"refused ({answer})"})
        return answer, message if answer >= 300 else ""

    @property
    def written(self) -> list[str]:
        return [body["metadata"]["annotations"][PROGRESS_EPOCHS] for _, body, _ in self.calls]


def make(api: FakeApi, clock: FakeClock | None = None, **options: Any) -> ProgressReporter:
    arguments: dict[str, Any] = {"name": "job-a", "namespace": "team-a", "server": "https://api:6443", "token": "t"}
    arguments.update(rank_zero=True, interval_s=60.0, environ={}, clock=clock or FakeClock(), transport=api)
    return ProgressReporter(**{**arguments, **options})


# -- import: what a training image has --------------------------------------------------------------------------


def test_importing_the_reporter_loads_the_standard_library_only():
    probe = (
        "import sys\nbefore = set(sys.modules)\nimport dl2.report\nprint(sorted(m for m in set(sys.modules) - before))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    loaded = eval(done.stdout.strip().splitlines()[-1])
    third_party = {m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names) - {"dl2"}
    assert third_party == set(), third_party
    assert {m for m in loaded if m.startswith("dl2.")} <= {
        "dl2.report",
        "dl2.report.callbacks",
        "dl2.report.reporter",
        "dl2.report.target",
    }


def test_the_reporter_speaks_the_controller_s_contract():
    assert PROGRESS_EPOCHS == contract.PROGRESS_EPOCHS
    assert (PYTORCHJOB.group, PYTORCHJOB.version, PYTORCHJOB.plural) == contract.PYTORCHJOB
    assert (VOLCANO_JOB.group, VOLCANO_JOB.version, VOLCANO_JOB.plural) == contract.VOLCANO_JOB


# -- the value: format and monotonicity ---------------------------------------------------------------------------


def progress_of(text: str) -> float:
    return contract.progress_epochs({"kind": "PyTorchJob", "metadata": {"annotations": {PROGRESS_EPOCHS: text}}})


@pytest.mark.parametrize(
    ("epochs", "text"), [(2.5, "2.5"), (3, "3.0"), (1 / 3, "0.3333"), (0.00004, "0.0"), (0.0001, "0.0001")]
)
def test_progress_is_written_like_dl2_s_other_decimal_annotations(epochs, text):
    assert format_epochs(epochs) == text
    assert progress_of(text) == round(epochs, 4)


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_every_progress_reads_back_through_the_contract_without_an_exponent(epochs):
    text = format_epochs(epochs)
    assert "e" not in text.lower()
    assert progress_of(text) == round(epochs, 4)


def test_values_only_grow():
    api, clock = FakeApi(), FakeClock()
    progress = make(api, clock, interval_s=0.0)
    assert progress.report(1.0)
    clock.now_s += 100
    assert not progress.report(0.5)  # a lower value is never written
    assert not progress.report(1.0)  # nor the same one
    assert not progress.report(1.00001)  # nor one the same once rounded
    assert progress.latest == 1.0 and not progress.flush()
    assert progress.report(1.5)
    assert api.written == ["1.0", "1.5"] and progress.errors == 0


# -- rate limiting --------------------------------------------------------------------------------------------------


def test_at_most_one_write_an_interval_and_a_final_flush():
    api, clock = FakeApi(), FakeClock()
    progress = make(api, clock, interval_s=60.0)
    assert progress.report(0.1)  # the first value goes at once
    clock.now_s += 10
    assert not progress.report(0.2)
    clock.now_s += 51
    assert progress.report(0.3)  # the interval has passed: the newest value
    clock.now_s += 1
    assert not progress.report(0.4)
    assert progress.flush() and not progress.flush()  # the last value, once
    assert api.written == ["0.1", "0.3", "0.4"] and progress.requests == 3
    url, body, headers = api.calls[0]
    assert url == "https://api:6443/apis/kubeflow.org/v1/namespaces/team-a/pytorchjobs/job-a"
    assert body == {"metadata": {"annotations": {PROGRESS_EPOCHS: "0.1"}}}
    assert headers["Content-Type"] == "application/merge-patch+json" and headers["Authorization"] == "Bearer t"


# -- errors: logged, counted, never raised --------------------------------------------------------------------------


def test_a_403_is_logged_once_with_the_rbac_hint_and_training_goes_on(caplog):
    api, clock = FakeApi(403, 403, 403), FakeClock()
    progress = make(api, clock)
    with caplog.at_level(logging.DEBUG, LOGGER):
        assert not progress.report(0.5)  # refused
        clock.now_s += 60
        assert not progress.report(0.6)  # refused again, an interval later: the next try waits two
        clock.now_s += 60
        assert not progress.report(0.7) and len(api.calls) == 2
        assert not progress.flush()  # a flush does not wait: refused a third time
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "403" in warnings[0] and "dl2-progress-reporter" in warnings[0] and "RoleBinding" in warnings[0]
    assert progress.errors == 3 and progress.written is None
    assert progress.flush()  # the binding arrives: the next write goes through
    assert progress.written == 0.7 and api.written[-1] == "0.7"


@pytest.mark.parametrize(
    "failure",
    [ConnectionRefusedError("refused"), TimeoutError("timed out"), ValueError("garbled"), 404, 500],
    ids=["refused", "timeout", "garbled", "not-found", "server-error"],
)
def test_no_failure_of_the_api_server_reaches_the_training_loop(failure, caplog):
    api, clock = FakeApi(failure), FakeClock()
    progress = make(api, clock)
    with caplog.at_level(logging.WARNING, LOGGER):
        assert not progress.report(1.0)
    assert progress.errors == 1 and caplog.records
    clock.now_s += 60
    assert progress.report(1.5) and progress.written == 1.5  # recovered; backoff reset


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, "many", None])
def test_a_value_that_is_no_progress_is_counted_not_raised(bad, caplog):
    api = FakeApi()
    progress = make(api)
    with caplog.at_level(logging.WARNING, LOGGER):
        assert not progress.report(bad)
    assert progress.errors == 1 and api.calls == [] and caplog.records


def test_an_unreadable_token_file_is_an_error_not_an_exception(tmp_path):
    api = FakeApi()
    folder = service_account(tmp_path)
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443", "DL2_JOB_NAME": "a"}
    progress = ProgressReporter(environ=environ, service_account=folder, clock=FakeClock(), transport=api)
    (folder / "token").unlink()
    assert not progress.report(1.0) and progress.errors == 1 and api.calls == []


# -- who reports, and on what: the environment ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "reports"),
    [
        ({}, True),
        ({"RANK": "0"}, True),
        ({"RANK": "3"}, False),
        ({"RANK": "zero"}, False),
        ({"VC_TASK_INDEX": "0"}, True),
        ({"VC_TASK_INDEX": "2"}, False),
        ({"RANK": "0", "VC_TASK_INDEX": "1"}, True),
        ({"RANK": "3", "DL2_REPORT": "1"}, True),
        ({"RANK": "0", "DL2_REPORT": "false"}, False),
    ],
)
def test_only_rank_zero_reports(environ, reports):
    assert is_rank_zero(environ) is reports
    api = FakeApi()
    progress = make(api, environ=environ, rank_zero=None)
    assert progress.enabled is reports and progress.report(1.0) is reports
    assert len(api.calls) == int(reports)


def test_an_explicit_rank_flag_wins_over_the_environment():
    assert make(FakeApi(), environ={"RANK": "1"}, rank_zero=True).enabled
    assert not make(FakeApi(), environ={"RANK": "0"}, rank_zero=False).enabled


def service_account(folder: Path, token: str = "sa-token", namespace: str = "team-b") -> Path:
    """What the kubelet mounts in a pod: the token, the cluster's CA and the pod's namespace."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(token)
    (folder / "ca.crt").write_text("not read by the fake transport")
    (folder / "namespace").write_text(namespace)
    return folder


def test_in_a_pod_everything_comes_from_the_environment_and_the_service_account(tmp_path):
    folder = service_account(tmp_path / "sa")
    environ = {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "DL2_JOB_NAME": "ps-job",
        "DL2_JOB_KIND": "VolcanoJob",
        "DL2_REPORT_INTERVAL_S": "30",
        "RANK": "0",
    }
    api, clock = FakeApi(), FakeClock()
    progress = ProgressReporter(environ=environ, service_account=folder, clock=clock, transport=api)
    assert progress.enabled and progress.interval_s == 30.0 and str(progress.job) == "Job team-b/ps-job"
    assert progress.server is not None and progress.server.ca_path == folder / "ca.crt"
    progress.report(0.5)
    (folder / "token").write_text("rotated")  # the kubelet rotates projected tokens in place
    clock.now_s += 30
    progress.report(1.0)
    url = "https://10.0.0.1:443/apis/batch.volcano.sh/v1alpha1/namespaces/team-b/jobs/ps-job"
    assert [call[0] for call in api.calls] == [url, url]
    assert [call[2]["Authorization"] for call in api.calls] == ["Bearer sa-token", "Bearer rotated"]


def test_explicit_arguments_win_and_ipv6_hosts_are_bracketed(tmp_path):
    folder = service_account(tmp_path / "sa")
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443", "DL2_JOB_NAME": "env-job"}
    progress = ProgressReporter(
        name="arg-job", kind="pytorchjobs", namespace="ns", environ=environ, service_account=folder, transport=FakeApi()
    )
    assert progress.server is not None and progress.server.url == "https://[fd00::1]:443"
    assert progress.job is not None and progress.job.path == "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/arg-job"


@pytest.mark.parametrize(
    ("environ", "why"),
    [
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, "DL2_JOB_NAME"),
        ({"DL2_JOB_NAME": "a"}, "KUBERNETES_SERVICE_HOST"),
        ({"DL2_JOB_NAME": "a", "DL2_JOB_KIND": "TFJob", "KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"},
         "unknown job kind"),
    ],
    ids=["no-name", "no-server", "unknown-kind"],
)  # fmt: skip
def test_a_reporter_that_cannot_tell_its_job_says_why_once_and_reports_nothing(environ, why, tmp_path, caplog):
    api = FakeApi()
    with caplog.at_level(logging.WARNING, LOGGER):
        progress = ProgressReporter(environ=environ, service_account=service_account(tmp_path), transport=api)
        assert not progress.report(1.0) and not progress.flush()
    assert not progress.enabled and why in progress.reason and api.calls == []
    assert len(caplog.records) == 1 and why in caplog.records[0].getMessage()


def test_job_kinds_by_any_of_their_names():
    assert job_kind("PyTorchJob") is PYTORCHJOB and job_kind("pytorch-job") is PYTORCHJOB
    assert job_kind("Job") is VOLCANO_JOB and job_kind("volcano") is VOLCANO_JOB and job_kind("jobs") is VOLCANO_JOB
    with pytest.raises(TargetError):
        job_kind("TFJob")


def test_report_progress_builds_one_reporter_from_the_environment(monkeypatch, caplog):
    monkeypatch.setattr(reporter, "_default", None)
    monkeypatch.delenv("DL2_JOB_NAME", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("DL2_REPORT", raising=False)
    monkeypatch.setattr(reporter.atexit, "register", lambda function: function)
    with caplog.at_level(logging.WARNING, LOGGER):
        assert not reporter.report_progress(1.0) and not reporter.report_progress(2.0)
    assert reporter.default_reporter() is reporter.default_reporter()
    assert "DL2_JOB_NAME" in reporter.default_reporter().reason and len(caplog.records) == 1


# -- the callbacks, through stand-ins for Lightning and transformers --------------------------------------------------


def stand_in(monkeypatch: pytest.MonkeyPatch, name: str, **attributes: Any) -> None:
    """A module `name` in sys.modules (its parents too); None for a package that must look uninstalled."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        monkeypatch.setitem(sys.modules, ".".join(parts[:i]), ModuleType(".".join(parts[:i])))
    module = ModuleType(name)
    for key, value in attributes.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


class LightningCallback:
    """Lightning's `Callback`: every hook a no-op."""

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None: ...

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None: ...

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None: ...

    def on_train_end(self, trainer: Any, pl_module: Any) -> None: ...


HF_EVENTS = (
    "on_init_end", "on_train_begin", "on_epoch_begin", "on_step_begin", "on_substep_end", "on_step_end",
    "on_log", "on_evaluate", "on_save", "on_epoch_end", "on_train_end",
)  # fmt: skip


class TrainerCallback:
    """transformers' `TrainerCallback`: every event a no-op returning None."""

    def __getattr__(self, name: str) -> Any:
        if name in HF_EVENTS:
            return lambda args, state, control, **kwargs: None
        raise AttributeError(name)


def fit(callback: Any, trainer: SimpleNamespace, epochs: int) -> None:
    """Lightning's fit loop, as far as the hooks go: current_epoch moves on after on_train_epoch_end."""
    callback.on_fit_start(trainer, None)
    for epoch in range(epochs):
        trainer.current_epoch = epoch
        for index in range(4):
            callback.on_train_batch_end(trainer, None, {"loss": 0.1}, ("x", "y"), index)
        callback.on_train_epoch_end(trainer, None)
    trainer.current_epoch = epochs
    callback.on_train_end(trainer, None)


@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_the_lightning_callback_reports_epochs_and_the_epoch_s_fraction(package, monkeypatch):
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)  # as if not installed
    stand_in(monkeypatch, package, Callback=LightningCallback)
    api, clock = FakeApi(), FakeClock()
    callback = lightning_callback(make(api, clock, interval_s=0.0))
    assert isinstance(callback, LightningCallback) and type(callback) is type(lightning_callback(make(api)))
    fit(callback, SimpleNamespace(current_epoch=0, num_training_batches=4, is_global_zero=True), epochs=2)
    assert api.written == ["0.25", "0.5", "0.75", "1.0", "1.25", "1.5", "1.75", "2.0"]


def test_the_lightning_callback_is_rate_limited_and_flushes_at_the_end(monkeypatch):
    stand_in(monkeypatch, "lightning.pytorch", Callback=LightningCallback)
    api = FakeApi()
    callback = lightning_callback(make(api, interval_s=60.0))  # the clock never moves: one write, then the flush
    fit(callback, SimpleNamespace(current_epoch=0, num_training_batches=4, is_global_zero=True), epochs=3)
    assert api.written == ["0.25", "3.0"]


def test_the_lightning_callback_reports_nothing_off_rank_zero_and_whole_epochs_for_unsized_data(monkeypatch):
    stand_in(monkeypatch, "lightning.pytorch", Callback=LightningCallback)
    api = FakeApi()
    elsewhere = SimpleNamespace(current_epoch=0, num_training_batches=4, is_global_zero=False)
    fit(lightning_callback(make(api)), elsewhere, epochs=2)
    assert api.calls == []
    unsized = SimpleNamespace(current_epoch=0, num_training_batches=float("inf"), is_global_zero=True)
    fit(lightning_callback(make(api, interval_s=0.0)), unsized, epochs=2)
    assert api.written == ["0.0", "1.0", "2.0"]  # whole epochs only (the first batch says it started)
    assert lightning_epochs(SimpleNamespace(current_epoch=5, num_training_batches=0), 1) == 5.0


def test_without_lightning_the_factory_says_what_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.setitem(sys.modules, "pytorch_lightning", None)
    with pytest.raises(ImportError, match=r"lightning\.pytorch or pytorch_lightning"):
        lightning_callback(make(FakeApi()))


def test_the_hugging_face_callback_reports_state_epoch_and_answers_every_event(monkeypatch):
    stand_in(monkeypatch, "transformers", TrainerCallback=TrainerCallback)
    api = FakeApi()
    callback = hf_callback(make(api, interval_s=0.0))
    assert isinstance(callback, TrainerCallback)
    state = SimpleNamespace(epoch=None, is_world_process_zero=True, global_step=0)
    control = SimpleNamespace(should_training_stop=False)

    def event(name: str) -> None:  # as the CallbackHandler calls each event on every callback
        assert getattr(callback, name)(None, state, control, model=None, optimizer=None) is None

    event("on_init_end")
    event("on_train_begin")
    for epoch in range(2):
        event("on_epoch_begin")
        for step in range(4):
            event("on_step_begin")
            state.global_step += 1
            state.epoch = epoch + (step + 1) / 4  # what the Trainer sets before on_step_end
            event("on_step_end")
            event("on_log")
        event("on_epoch_end")
    event("on_train_end")
    assert api.written == ["0.25", "0.5", "0.75", "1.0", "1.25", "1.5", "1.75", "2.0"]
    state.is_world_process_zero, state.epoch = False, 3.0
    event("on_step_end")
    event("on_train_end")
    assert len(api.calls) == 8


def test_without_transformers_the_factory_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match="transformers"):
        hf_callback(make(FakeApi()))


# -- on the real control plane --------------------------------------------------------------------------------------

BOUND, UNBOUND, ACCOUNT = "dl2-report", "dl2-report-unbound", "trainer"


def _create(rest: Any, resource: Any, namespace: str | None, body: dict[str, Any]) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        rest.create(resource, namespace, body)
    except ApiException as error:
        if error.status != 409:
            raise


def _allowed(rest: Any, namespace: str, group: str, plural: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{ACCOUNT}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
            "resourceAttributes": {"namespace": namespace, "verb": "patch", "group": group, "resource": plural},
        },
    }
    answer = rest.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


@pytest.fixture
def training_namespaces(kube):
    """Two namespaces, each with a PyTorchJob and a Volcano Job and the ServiceAccount the pods run as; the
    ClusterRole from `k8s/reporter-rbac.yaml`, bound to that account in `BOUND` only. Tokens by TokenRequest."""
    from dl2.kube.rest import NAMESPACES, PYTORCHJOBS, VOLCANO_JOBS
    from testbed.controlplane.apply import apply, documents
    from testbed.twin import manifests
    from tests.builders import allreduce_job, make_job

    rest = kube.rest()
    apply(rest, documents(ROOT / "k8s" / "reporter-rbac.yaml"))
    tokens = {}
    for namespace in (BOUND, UNBOUND):
        _create(rest, NAMESPACES, None, {"metadata": {"name": namespace}})
        tokens[namespace] = kube.plane.service_account_token(namespace, ACCOUNT)
        rest.create(PYTORCHJOBS, namespace, manifests.job(allreduce_job("pt").spec, "pt", namespace))
        rest.create(VOLCANO_JOBS, namespace, manifests.job(make_job("ps", 10.0).spec, "ps", namespace))
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "dl2-progress-reporter", "namespace": BOUND},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "dl2-progress-reporter"},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": BOUND}],
    }
    apply(rest, [binding])
    deadline = time.monotonic() + 10
    while not all(_allowed(rest, BOUND, kind.group, kind.plural) for kind in (PYTORCHJOB, VOLCANO_JOB)):
        assert time.monotonic() < deadline, "the RoleBinding never took effect"
        time.sleep(0.05)
    return rest, tokens


def _annotation(rest: Any, kind: Any, namespace: str, name: str) -> tuple[str | None, float]:
    from dl2.kube.rest import PYTORCHJOBS, VOLCANO_JOBS

    obj = rest.get(PYTORCHJOBS if kind is PYTORCHJOB else VOLCANO_JOBS, namespace, name)
    return obj["metadata"].get("annotations", {}).get(PROGRESS_EPOCHS), contract.progress_epochs(obj)


def test_a_bound_service_account_writes_progress_on_both_job_kinds(kube, training_namespaces, caplog):
    rest, tokens = training_namespaces
    offset = kube.plane.audit_offset()
    for kind, name in ((PYTORCHJOB, "pt"), (VOLCANO_JOB, "ps")):
        progress = ProgressReporter(
            name=name, kind=kind, namespace=BOUND, server=kube.url, token=tokens[BOUND], ca_path=kube.plane.ca,
            rank_zero=True,
        )  # fmt: skip
        assert progress.report(1.25)
        assert not progress.report(1.5)  # within the minute: kept for the flush
        assert _annotation(rest, kind, BOUND, name) == ("1.25", 1.25)
        assert progress.flush()
        assert _annotation(rest, kind, BOUND, name) == ("1.5", 1.5)  # what the controller reads
        assert progress.errors == 0 and progress.requests == 2
    # the API server saw the account do exactly what the ClusterRole grants: patch both kinds, nothing else
    user = f"system:serviceaccount:{BOUND}:{ACCOUNT}"
    deadline = time.monotonic() + 5
    while len(events := [e for e in kube.plane.audit_events(offset) if e.user == user]) < 4:
        assert time.monotonic() < deadline, events
        time.sleep(0.05)
    assert {(e.permission, e.code) for e in events} == {
        (("kubeflow.org", "pytorchjobs", "patch"), 200),
        (("batch.volcano.sh", "jobs", "patch"), 200),
    }


def test_a_bound_account_may_change_nothing_but_progress(kube, training_namespaces):
    """RBAC lets the bound account patch every field of its namespace's jobs; the admission policy
    (`k8s/admission.yaml`) refuses all but the `dl2.io/progress` annotations, in a dry run too. An account that may
    update jobs (here the admin) is not held to it."""
    from kubernetes.client.exceptions import ApiException

    from dl2.kube.rest import MERGE_PATCH, PYTORCHJOBS, Rest

    rest, tokens = training_namespaces
    trainer = Rest(kube.plane.client(token=tokens[BOUND], user_agent="trainer"))
    path = PYTORCHJOBS.path(BOUND, "pt")
    trainer.request("PATCH", path, {"metadata": {"annotations": {PROGRESS_EPOCHS: "2.0"}}}, content_type=MERGE_PATCH)
    (container,) = rest.get(PYTORCHJOBS, BOUND, "pt")["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"
    ]
    image = {"containers": [{"name": container["name"], "image": "attacker.example/evil:1"}]}
    rewrites = [
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": image}}}}},
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 64}}}},
        {"metadata": {"annotations": {contract.MAX_WORKERS: "64"}}},
        {"metadata": {"labels": {"team": "other"}}},
    ]
    # the API server loads a policy from its own watch a moment after it is created and admits everything until
    # then (the session's cluster may be seconds old): wait until a dry-run rewrite is refused
    deadline = time.monotonic() + 60
    while True:
        try:
            trainer.request("PATCH", path, rewrites[0], {"dryRun": "All"}, MERGE_PATCH)
        except ApiException as error:
            assert error.status == 403, error.body
            break
        assert time.monotonic() < deadline, "the admission policy was not enforced within a minute"
        time.sleep(0.2)
    for body in rewrites:
        for query in (None, {"dryRun": "All"}):
            with pytest.raises(ApiException) as refused:
                trainer.request("PATCH", path, body, query, MERGE_PATCH)
            assert refused.value.status == 403, body
            assert "may change only a job's dl2.io/progress annotations" in refused.value.body, refused.value.body
        rest.request("PATCH", path, body, {"dryRun": "All"}, MERGE_PATCH)
    assert _annotation(rest, PYTORCHJOB, BOUND, "pt") == ("2.0", 2.0)


def test_a_pod_s_reporter_finds_everything_in_its_environment(kube, training_namespaces, tmp_path):
    rest, tokens = training_namespaces
    folder = tmp_path / "serviceaccount"  # as the kubelet mounts it
    folder.mkdir()
    (folder / "token").write_text(tokens[BOUND])
    (folder / "ca.crt").write_bytes(Path(kube.plane.ca).read_bytes())
    (folder / "namespace").write_text(BOUND)
    host, port = kube.url.removeprefix("https://").rsplit(":", 1)
    environ = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port, "RANK": "0"}
    environ |= {"DL2_JOB_NAME": "ps", "DL2_JOB_KIND": "Job"}  # from the pod's label volcano.sh/job-name
    assert ProgressReporter(environ=environ, service_account=folder).report(0.5)
    assert _annotation(rest, VOLCANO_JOB, BOUND, "ps") == ("0.5", 0.5)
    assert not ProgressReporter(environ={**environ, "RANK": "1"}, service_account=folder).report(0.75)


def test_without_the_binding_the_api_server_refuses_and_training_goes_on(kube, training_namespaces, caplog):
    rest, tokens = training_namespaces
    for kind, name in ((PYTORCHJOB, "pt"), (VOLCANO_JOB, "ps")):
        progress = ProgressReporter(
            name=name, kind=kind, namespace=UNBOUND, server=kube.url, token=tokens[UNBOUND], ca_path=kube.plane.ca,
            rank_zero=True,
        )  # fmt: skip
        caplog.clear()
        with caplog.at_level(logging.DEBUG, LOGGER):
            assert not progress.report(0.5)
            assert not progress.flush()  # refused again; not logged again
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "403" in warnings[0] and "dl2-progress-reporter" in warnings[0], warnings
        assert progress.errors == 2 and progress.written is None
        assert _annotation(rest, kind, UNBOUND, name) == (None, 0.0)
    # a binding grants in its own namespace only: the bound account cannot write the other namespace's jobs
    elsewhere = ProgressReporter(
        name="pt", namespace=UNBOUND, server=kube.url, token=tokens[BOUND], ca_path=kube.plane.ca, rank_zero=True
    )
    assert not elsewhere.report(0.5) and elsewhere.errors == 1


def test_a_kubeflow_job_s_reported_progress_drives_the_controller_s_decisions(
    kube, policies, training_namespaces, tmp_path
):
    """End to end on the real control plane, nothing of the twin: a PyTorchJob whose pod carries only Kubeflow's
    labels, its progress reported by `dl2.report` under the trainer's ServiceAccount; the controller (its own
    ServiceAccount, DRF as the model) finds the pod by those labels, records the reported progress, resizes the
    job, and the next slot's record has the progress reported since."""
    from dl2.core import NodeSpec, Resources
    from dl2.core.log_format import read_log
    from dl2.kube.controller import Controller, ControllerConfig
    from dl2.kube.rest import KUBEFLOW_PODS, NAMESPACES, NODES, PYTORCHJOBS, Resource
    from testbed.controlplane.apply import apply
    from testbed.controlplane.install import managed_namespace
    from testbed.twin import manifests
    from tests.builders import heuristic_loader

    rest, tokens = training_namespaces
    apply(rest, managed_namespace(BOUND))  # labelled managed, and the controller's resize bound there
    node = rest.create(NODES, None, manifests.node(NodeSpec(0, Resources(32, 512, 4096)), "report-node-0"))
    job = rest.get(PYTORCHJOBS, BOUND, "pt")
    pod = manifests.pod(contract.job_spec(job), "pt", BOUND, "pytorchjobs", job["metadata"]["uid"], "worker", 0,
                        node["metadata"]["name"], "default-scheduler")  # fmt: skip
    assert not any(key.startswith("dl2.io/") for key in pod["metadata"]["labels"])  # Kubeflow's labels only
    pod_version = rest.create(KUBEFLOW_PODS, BOUND, pod)["metadata"]["resourceVersion"]
    trainer = ProgressReporter(
        name="pt", kind=PYTORCHJOB, namespace=BOUND, server=kube.url, token=tokens[BOUND], ca_path=kube.plane.ca,
        rank_zero=True, interval_s=0.0,
    )  # fmt: skip
    policies.create("active")
    config = ControllerConfig("report", decision_log=tmp_path / "decisions", clock="cluster")
    controller = Controller(kube.controller_api("report"), config, heuristic_loader("drf"))
    try:
        controller.refresh_policy(policies.read())
        for slot, epochs in ((1, 1.5), (2, 4.0), (3, 5.0)):  # a slot's record is written once the next has observed it
            assert trainer.report(epochs)
            barrier = {
                KUBEFLOW_PODS.key: int(pod_version),
                PYTORCHJOBS.key: int(rest.get(PYTORCHJOBS, BOUND, "pt")["metadata"]["resourceVersion"]),
            }
            controller.run_slot(slot, slot * 600.0, 600.0, barrier)
    finally:
        controller.cache.stop()
        controller.events.stop()
        rest.request("DELETE", NODES.path(None, "report-node-0"))
        # namespaces outlive a test on the session's control plane: later tests count the managed ones
        rest.merge_patch(NAMESPACES, None, BOUND, {"metadata": {"labels": {contract.MANAGED_LABEL: None}}})
        bindings = Resource("rbac.authorization.k8s.io", "v1", "rolebindings")
        rest.request("DELETE", bindings.path(BOUND, "dl2-job-resizer"))
    records = [r for r in read_log(tmp_path / "decisions" / "dl2-local") if r.job_id == job["metadata"]["name"]]
    assert [r.progress_epochs for r in records] == [1.5, 4.0]  # what the reporter wrote, slot by slot
    assert records[0].held_workers == 1  # its pod, found by Kubeflow's labels on the node it runs on
    assert [r.observed_epochs for r in records] == [2.5, 1.0]  # the progress the next slot saw
    assert records[0].applied_workers > 1 and contract.replicas(rest.get(PYTORCHJOBS, BOUND, "pt"))[0] > 1
