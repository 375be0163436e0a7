// pause: the sandbox process of the real node's pods, as Kubernetes' build/pause/linux/pause.c does it:
// hold the pod's namespaces, reap orphans (it is PID 1 when the pod shares its PID namespace), exit 0 on
// SIGINT or SIGTERM. The kubelet's pause image cannot be pulled here (no registry), so it is built locally.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
