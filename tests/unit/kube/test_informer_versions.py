"""An informer's two versions: what its cache reflects (bookmarks included) and its newest change (the one a
barrier for another informer of the same selection may name)."""

from dl2.kube.informer import Informer
from dl2.kube.metrics import Metrics
from dl2.kube.rest import PODS


def pod(name: str, version: int) -> dict:
    return {"metadata": {"namespace": "team", "name": name, "resourceVersion": str(version)}}


def test_a_bookmark_moves_the_version_but_not_the_newest_change():
    informer = Informer(rest=None, resource=PODS, metrics=Metrics())  # type: ignore[arg-type]
    informer._replace([pod("a", 3), pod("b", 7)], "12")  # a list: at 12, its newest object changed at 7
    assert (informer.version, informer.changed_version) == (12, 7)
    informer._apply({"type": "ADDED", "object": pod("c", 15)})
    assert (informer.version, informer.changed_version) == (15, 15)
    informer._apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "40"}}})
    assert (informer.version, informer.changed_version) == (40, 15)
    informer._apply({"type": "DELETED", "object": pod("a", 41)})
    assert (informer.version, informer.changed_version) == (41, 41)
    assert sorted(obj["metadata"]["name"] for obj in informer.items()) == ["b", "c"]
    # a barrier at the newest change is met at once by a cache that saw the same changes
    assert informer.wait_for(informer.changed_version, timeout_s=0)
