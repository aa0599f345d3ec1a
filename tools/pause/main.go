// pause holds a pod's namespaces for the pod's lifetime, as registry.k8s.io/pause does: it sleeps until SIGTERM or
// SIGINT (then exits 0), and, being the first process of the pod's PID namespace when the pod shares one, reaps the
// children that are reparented to it. Built here because no container registry is reachable from these machines.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (dl2, tools/pause)")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not the first process of its PID namespace")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "pause: shutting down, got signal %v\n", received)
			os.Exit(0)
		}
		reap()
	}
}

// reap waits for every child that has exited (one SIGCHLD may stand for several), without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
