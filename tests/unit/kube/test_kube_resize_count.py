"""Counting the controller's resizes from the audit log when a kill cuts one off: kube-apiserver audits a request
whose client died while it handled it as 504 though its write may have landed (`tests.builders.sent_resizes`, what
`test_kube_serve`'s runs under kills compare with the uninterrupted run)."""

from __future__ import annotations

from testbed.controlplane.cluster import AuditEvent
from tests.builders import CONTROLLER_AGENT, CUT_OFF, sent_resizes


def patch(name: str, code: int, resource: str = "pytorchjobs", group: str = "kubeflow.org") -> AuditEvent:
    return AuditEvent("dl2", "patch", group, resource, "", "team-a", name, code, f"{CONTROLLER_AGENT}/serve-0", "/", "")


def test_a_cut_off_resize_the_restart_does_not_resend_had_landed_and_counts():
    # the slot of the flaky run: wlm and vgg-16 accepted, inception-bn cut off by the kill at `resized-1` (its write
    # landed: the restart found the job at its target and sent nothing)
    events = [patch("wlm", 200), patch("vgg-16", 200, "jobs", "batch.volcano.sh"), patch("inception-bn", CUT_OFF)]
    assert sent_resizes(events) == {"wlm": 1, "vgg-16": 1, "inception-bn": 1}


def test_a_cut_off_resize_the_restart_resends_counts_once():
    events = [patch("wlm", 200), patch("inception-bn", CUT_OFF), patch("inception-bn", 200)]
    assert sent_resizes(events) == {"wlm": 1, "inception-bn": 1}


def test_accepted_resizes_count_each_and_other_answers_none():
    events = [patch("wlm", 200), patch("wlm", 200), patch("vgg-16", 403), patch("seq2seq", 422)]
    others = [
        AuditEvent("dl2", "patch", "dl2.io", "schedulerpolicies", "status", "", "p", 200, CONTROLLER_AGENT, "/", ""),
        AuditEvent("admin", "patch", "kubeflow.org", "pytorchjobs", "", "team-a", "wlm", 200, "kubectl", "/", ""),
    ]
    assert sent_resizes([*events, *others]) == {"wlm": 2}
