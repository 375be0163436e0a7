// teesim-guest: the entrypoint of the real node's guest image. It stands for a TEE guest (a TD, an SNP guest):
// where QEMU would create the guest through KVM, it asks teesim's kernel service (teesim node kernel,
// simulator/teesim/kernel/service.py) for the launch over a unix socket. The service charges this process's
// cgroup in the node's misc tree through teesim's kernel model; the charge is held while the connection is
// open, so it is released when this process exits, however it exits, as KVM releases the key with the VM.
//
// Usage: teesim-guest [-socket PATH] [-guest snp|sev-es] [-hold DURATION] RESOURCE [AMOUNT]
// -hold: the guest's lifetime (Go's duration syntax, 90s, 1.5m): once charged it exits 0 after that long, as a
// guest shut down from inside; without it the guest runs until SIGTERM (teesim run --real-node sets it).
// On a refused launch it prints the kernel's error and exits 1 (the container fails to start, as a
// virt-launcher or a Kata shim does when QEMU cannot create the guest).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	socket := flag.String("socket", "/run/teesim/kernel.sock", "teesim's kernel service")
	guest := flag.String("guest", "", "guest kind for sev_es: snp (default) or sev-es")
	hold := flag.Duration("hold", 0, "exit 0 this long after the launch (0: run until SIGTERM)")
	flag.Parse()
	if flag.NArg() < 1 || flag.NArg() > 2 || *hold < 0 {
		fmt.Fprintln(os.Stderr, "usage: teesim-guest [-socket PATH] [-guest snp|sev-es] [-hold DURATION] RESOURCE [AMOUNT]")
		os.Exit(2)
	}
	amount := "1"
	if flag.NArg() == 2 {
		if _, err := strconv.ParseUint(flag.Arg(1), 10, 32); err != nil {
			fmt.Fprintf(os.Stderr, "teesim-guest: amount %q is not a whole number\n", flag.Arg(1))
			os.Exit(2)
		}
		amount = flag.Arg(1)
	}
	os.Exit(run(*socket, flag.Arg(0), amount, *guest, *hold))
}

func run(socket, resource, amount, guest string, hold time.Duration) int {
	// SIGTERM (the kubelet stopping the pod) ends the guest; registered before the launch so none is lost.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	conn, err := net.Dial("unix", socket)
	if err != nil {
		fmt.Fprintf(os.Stderr, "teesim-guest: cannot reach the kernel at %s: %v\n", socket, err)
		return 1
	}
	defer conn.Close()
	request := strings.TrimSpace(fmt.Sprintf("launch %s %s %s", resource, amount, guest))
	if _, err := fmt.Fprintln(conn, request); err != nil {
		fmt.Fprintf(os.Stderr, "teesim-guest: launch request failed: %v\n", err)
		return 1
	}
	answer, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		fmt.Fprintf(os.Stderr, "teesim-guest: no answer from the kernel: %v\n", err)
		return 1
	}
	verdict, detail, _ := strings.Cut(strings.TrimSpace(answer), " ")
	if verdict != "ok" {
		name, message, _ := strings.Cut(detail, " ")
		fmt.Fprintf(os.Stderr, "teesim-guest: launch of %s %s failed: %s: %s\n", resource, amount, name, message)
		return 1
	}
	fmt.Printf("teesim-guest: %s %s charged to %s; running\n", resource, amount, detail)
	var ended <-chan time.Time // nil (never) without -hold
	if hold > 0 {
		ended = time.After(hold)
	}
	select {
	case <-stop:
		fmt.Println("teesim-guest: stopping; the key is released with this process")
	case <-ended:
		fmt.Printf("teesim-guest: held for %s; the key is released with this process\n", hold)
	}
	return 0
}
