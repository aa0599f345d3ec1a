"""The training side of the job contract: a training job reports its progress to dl2's controller by writing the
annotation `dl2.io/progress-epochs` (epochs done, fractional) on its own PyTorchJob or Volcano Job.

    from dl2.report import report_progress
    for epoch in range(epochs):
        for step, batch in enumerate(loader):
            ...
            report_progress(epoch + (step + 1) / len(loader))   # rank 0 writes, at most once a minute

Lightning: `Trainer(callbacks=[lightning_callback()])`; Hugging Face: `Trainer(..., callbacks=[hf_callback()])`.
The job and the API server come from the pod's environment (`dl2.report.target`), the permission from the
ClusterRole `dl2-progress-reporter` (`k8s/reporter-rbac.yaml`) bound to the pod's ServiceAccount. How-to:
`docs/reporting.md`.

Standard library only, and nothing else of dl2: a training image needs `pip install --no-deps dl2`, not dl2's
dependencies; the callbacks import Lightning or transformers only when built.
"""

from dl2.report.callbacks import hf_callback, lightning_callback
from dl2.report.reporter import ProgressReporter, default_reporter, format_epochs, report_progress
from dl2.report.target import PROGRESS_EPOCHS, PYTORCHJOB, VOLCANO_JOB, JobKind, JobRef

__all__ = [
    "PROGRESS_EPOCHS",
    "PYTORCHJOB",
    "VOLCANO_JOB",
    "JobKind",
    "JobRef",
    "ProgressReporter",
    "default_reporter",
    "format_epochs",
    "hf_callback",
    "lightning_callback",
    "report_progress",
]
