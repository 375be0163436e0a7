// kubevirt-plugins starts KubeVirt's own virt-handler device plugins, unchanged, the way virt-handler
// starts them (kubevirt.io/kubevirt v1.9.0, pkg/virt-handler/vm.go NewVirtualMachineController and
// Run): device_manager.NewDeviceController with the permanent plugins (kvm, tun, vhost-net) and the
// cluster configuration, then DeviceController.Run. With the WorkloadEncryptionTDX feature gate its
// TDX plugin reads misc.capacity "tdx" once from /proc/1/root/sys/fs/cgroup/misc.capacity and
// advertises that many devices.kubevirt.io/tdx; with WorkloadEncryptionSEV its generic /dev/sev plugin
// advertises --max-devices devices.kubevirt.io/sev. Every plugin registers with the kubelet at
// /var/lib/kubelet/device-plugins/kubelet.sock.
//
// KubeVirt hard-codes those host paths: run it under scripts/teesim-serve-ns.sh --kubevirt, which gives
// it a private mount and PID namespace over a `teesim serve` root.
//
// What differs from a virt-handler pod: the cluster configuration comes from a KubeVirt object held in a
// local store (KubeVirt's own pkg/testutils.NewFakeClusterConfigUsingKV, as KubeVirt's unit tests build
// it) instead of an informer on an API server, and the node store holds one Node named --node-name.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/opencontainers/cgroups"
	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/log"

	"kubevirt.io/kubevirt/pkg/testutils"
	device_manager "kubevirt.io/kubevirt/pkg/virt-handler/device-manager"
)

// virt-handler's defaults (cmd/virt-handler/virt-handler.go: maxDevices = 1000; the hypervisor device
// of the KVM hypervisor is "kvm").
const (
	defaultMaxDevices = 1000
	hypervisorDevice  = "kvm"
)

func main() {
	nodeName := flag.String("node-name", "teesim-node", "the node virt-handler runs on (its --hostname-override)")
	maxDevices := flag.Int("max-devices", defaultMaxDevices, "virt-handler's --max-devices")
	gates := flag.String("feature-gates", "WorkloadEncryptionTDX", "KubeVirt feature gates, comma-separated")
	flag.Parse()

	log.InitializeLogging("virt-handler")
	kv := &v1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"},
		Spec: v1.KubeVirtSpec{Configuration: v1.KubeVirtConfiguration{
			DeveloperConfiguration: &v1.DeveloperConfiguration{FeatureGates: splitGates(*gates)},
		}},
	}
	clusterConfig, _, _ := testutils.NewFakeClusterConfigUsingKV(kv)

	nodeStore := cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := nodeStore.Add(&k8sv1.Node{ObjectMeta: metav1.ObjectMeta{Name: *nodeName}}); err != nil {
		fmt.Fprintf(os.Stderr, "kubevirt-plugins: %v\n", err)
		os.Exit(1)
	}

	// As NewVirtualMachineController: "rwm" on a cgroup v2 host.
	permissions := "rw"
	if cgroups.IsCgroup2UnifiedMode() {
		permissions = "rwm"
	}
	controller := device_manager.NewDeviceController(
		*nodeName,
		*maxDevices,
		permissions,
		device_manager.PermanentHostDevicePlugins(hypervisorDevice, *maxDevices, permissions),
		clusterConfig,
		nodeStore,
	)

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		controller.Run(stop)
		close(done)
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	close(stop)
	<-done
}

func splitGates(gates string) []string {
	var out []string
	for _, gate := range strings.Split(gates, ",") {
		if gate = strings.TrimSpace(gate); gate != "" {
			out = append(out, gate)
		}
	}
	return out
}
