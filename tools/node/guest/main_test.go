package main

import (
	"testing"
	"time"
)

// The waits teesim run --real-node asks for: virt-handler's back-off (doubling to a cap) and the kubelet's sandbox
// retry (a constant plus jitter).
func TestBackoffWait(t *testing.T) {
	vmi := backoff{first: 5 * time.Millisecond, factor: 2, max: time.Second}
	for failures, want := range map[int]time.Duration{1: 5 * time.Millisecond, 3: 20 * time.Millisecond, 20: time.Second} {
		if got := vmi.wait(failures); got != want {
			t.Errorf("VMI wait after %d failures: %v, want %v", failures, got, want)
		}
	}
	kata := backoff{first: 10 * time.Second, factor: 1, jitter: 5 * time.Second}
	for failures := 1; failures < 50; failures++ {
		if got := kata.wait(failures); got < 10*time.Second || got > 15*time.Second {
			t.Errorf("Kata wait after %d failures: %v, want 10 s to 15 s", failures, got)
		}
	}
}
