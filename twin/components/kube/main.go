// Command kube is Kubernetes' own kube-apiserver, kube-controller-manager and kube-scheduler
// (k8s.io/kubernetes at the version go.mod pins, with every k8s.io staging module at the
// matching version), in one binary that runs the one its first argument names: the three
// share most of their code, so one link instead of three. `go install k8s.io/kubernetes/...`
// is refused for that module (its go.mod replaces the staging modules with local paths);
// a module that requires them all at the release's versions builds it.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	commands := map[string]func() *cobra.Command{
		"kube-apiserver":          apiserver.NewAPIServerCommand,
		"kube-controller-manager": controllermanager.NewControllerManagerCommand,
		"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	}
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: kube kube-apiserver|kube-controller-manager|kube-scheduler [flags]")
		os.Exit(2)
	}
	command := commands[os.Args[1]]()
	command.SetArgs(os.Args[2:])
	os.Exit(cli.Run(command))
}
