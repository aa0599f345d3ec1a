"""A real Kubernetes control plane on one machine, for tests, demos and `dl2 cluster`.

etcd, kube-apiserver (client certificates and ServiceAccount tokens, `--authorization-mode=RBAC`, an audit log),
kube-controller-manager, kube-scheduler and kwok (nodes and pods without kubelets), built from the Go module proxy
(`make kube-assets`, `assets`) and run as processes on loopback (`ControlPlane`), the way controller-runtime's envtest
and kwokctl serve Go operators. `FaultProxy` sits in front of the API server to inject what real ones do to clients
(409, 500, timeouts, dropped and expired watches). The controller (`dl2.kube`) never imports this package.
"""
