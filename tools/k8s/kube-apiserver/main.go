// kube-apiserver as upstream's cmd/kube-apiserver builds it (k8s.io/kubernetes v1.37.2).
package main

import (
	"os"
	_ "time/tzdata" // time zones for CronJob, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
