"""The test bed: a real Kubernetes cluster on this machine for dl2 to run against, and what stands in for the parts
no machine here has.

`testbed.controlplane` runs a real control plane on loopback (etcd, kube-apiserver with RBAC, controller manager,
scheduler, kwok), real nodes (kubelets with containerd and runc, `testbed.controlplane.nodes`), the S3 store and
Prometheus the tests use, and builds the dl2 image; `testbed.twin` runs the jobs of a simulated cluster against it
(their progress from the simulator, since no GPU runs them); `testbed.harness` drives dl2 on a running control plane
for the Kubernetes tests and benchmarks. Nothing here runs in a user's cluster: the library
(`dl2`) imports it only where `dl2 cluster` starts it.
"""
