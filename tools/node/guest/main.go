// teesim-guest: the entrypoint of the real node's guest image. It stands for a TEE guest (a TD, an SNP guest):
// where QEMU would create the guest through KVM, it asks teesim's kernel service (teesim node kernel,
// simulator/teesim/kernel/service.py) for the launch over a unix socket. The service charges this process's
// cgroup in the node's misc tree through teesim's kernel model; the charge is held while the connection is
// open, so it is released when this process exits, however it exits, as KVM releases the key with the VM.
//
// Usage: teesim-guest [-socket PATH] [-guest snp|sev-es] [-not-before UNIX_SECONDS] [-hold DURATION]
// [-retry DURATION] [-retry-factor F] [-retry-max DURATION] [-retry-jitter DURATION] RESOURCE [AMOUNT]
//
// -not-before: the first launch waits until then (the VMM's setup before it creates the guest; teesim run
// --real-node sets the pod's creation plus the model's launch delay, divided by its pace).
// -hold: the guest's lifetime (Go's duration syntax, 90s, 1.5m): once charged it exits 0 after that long, as a
// guest shut down from inside; without it the guest runs until SIGTERM. -retry: a refused launch is tried again
// after this long, each wait -retry-factor times the last, at most -retry-max, plus up to -retry-jitter at random:
// the process stays up meanwhile, as a virt-launcher does while virt-handler retries its domain. teesim run
// --real-node sets them from the model's retry rules (teesim.report.real_node), scaled by its pace.
// Without -retry, on a refused launch it prints the kernel's error and exits 1 (the container fails to start, as a
// virt-launcher or a Kata shim does when QEMU cannot create the guest).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// backoff is the wait between refused launches: first, then factor times the last, at most max, plus jitter.
type backoff struct {
	first, max, jitter time.Duration
	factor             float64
}

func (b backoff) wait(failures int) time.Duration {
	wait := float64(b.first)
	for i := 1; i < failures && wait < float64(b.max); i++ {
		wait *= b.factor
	}
	if b.max > 0 && wait > float64(b.max) {
		wait = float64(b.max)
	}
	if b.jitter > 0 {
		wait += rand.Float64() * float64(b.jitter)
	}
	return time.Duration(wait)
}

func main() {
	socket := flag.String("socket", "/run/teesim/kernel.sock", "teesim's kernel service")
	guest := flag.String("guest", "", "guest kind for sev_es: snp (default) or sev-es")
	hold := flag.Duration("hold", 0, "exit 0 this long after the launch (0: run until SIGTERM)")
	notBefore := flag.Float64("not-before", 0, "launch no earlier than this Unix time, in seconds")
	var retry backoff
	flag.DurationVar(&retry.first, "retry", 0, "try a refused launch again after this long (0: exit 1)")
	flag.Float64Var(&retry.factor, "retry-factor", 1, "each wait this many times the last")
	flag.DurationVar(&retry.max, "retry-max", 0, "the longest wait (0: no bound)")
	flag.DurationVar(&retry.jitter, "retry-jitter", 0, "up to this much added to each wait at random")
	flag.Parse()
	if flag.NArg() < 1 || flag.NArg() > 2 || *hold < 0 || retry.first < 0 || retry.factor < 1 || retry.jitter < 0 {
		fmt.Fprintln(os.Stderr, "usage: teesim-guest [-socket PATH] [-guest snp|sev-es] [-not-before UNIX_SECONDS] [-hold DURATION] "+
			"[-retry DURATION [-retry-factor F] [-retry-max DURATION] [-retry-jitter DURATION]] RESOURCE [AMOUNT]")
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
	if wait := time.Until(time.UnixMilli(int64(*notBefore * 1000))); wait > 0 {
		time.Sleep(wait)
	}
	os.Exit(run(*socket, flag.Arg(0), amount, *guest, *hold, retry))
}

func run(socket, resource, amount, guest string, hold time.Duration, retry backoff) int {
	// SIGTERM (the kubelet stopping the pod) ends the guest; registered before the launch so none is lost.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	for failures := 1; ; failures++ {
		conn, refused := launch(socket, resource, amount, guest)
		if conn != nil {
			defer conn.Close()
			return serve(stop, hold)
		}
		if !refused || retry.first == 0 {
			return 1
		}
		select {
		case <-stop:
			return 1
		case <-time.After(retry.wait(failures)):
		}
	}
}

// launch asks the kernel for the guest; the connection holds the charge. refused: the kernel said no (worth
// another try), not a broken socket.
func launch(socket, resource, amount, guest string) (conn net.Conn, refused bool) {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		fmt.Fprintf(os.Stderr, "teesim-guest: cannot reach the kernel at %s: %v\n", socket, err)
		return nil, false
	}
	request := strings.TrimSpace(fmt.Sprintf("launch %s %s %s", resource, amount, guest))
	if _, err := fmt.Fprintln(conn, request); err != nil {
		fmt.Fprintf(os.Stderr, "teesim-guest: launch request failed: %v\n", err)
		conn.Close()
		return nil, false
	}
	answer, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		fmt.Fprintf(os.Stderr, "teesim-guest: no answer from the kernel: %v\n", err)
		conn.Close()
		return nil, false
	}
	verdict, detail, _ := strings.Cut(strings.TrimSpace(answer), " ")
	if verdict != "ok" {
		name, message, _ := strings.Cut(detail, " ")
		fmt.Fprintf(os.Stderr, "teesim-guest: launch of %s %s failed: %s: %s\n", resource, amount, name, message)
		conn.Close()
		return nil, true
	}
	fmt.Printf("teesim-guest: %s %s charged to %s; running\n", resource, amount, detail)
	return conn, false
}

// serve runs the guest until SIGTERM or, with hold, that long.
func serve(stop <-chan os.Signal, hold time.Duration) int {
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
