// kubectl as upstream's cmd/kubectl builds it (k8s.io/kubectl v0.37.2).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) //nolint:errcheck // as upstream
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
