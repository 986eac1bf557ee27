// Command karpenter is Karpenter's own core (sigs.k8s.io/karpenter at the version go.mod
// pins: provisioning, the NodeClaim lifecycle, disruption, consolidation, expiry, drift,
// node repair) with the twin's AWS cloud provider (./provider), which launches instances
// through the EC2 API of the AWS emulator instead of AWS.
//
// Put together as Karpenter's own KWOK provider main (kwok/main.go) is: the operator, the
// cloud provider decorated with NodeOverlays, the cluster state, and the core controllers.
package main

import (
	"github.com/samber/lo"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"

	"hyperguard.dev/twin/components/karpenter/provider"
)

func main() {
	ctx, op := operator.NewOperator()
	cloudProvider, err := provider.New(ctx, op.GetClient())
	if err != nil {
		log.FromContext(ctx).Error(err, "failed building the cloud provider")
		panic(err)
	}
	decorated := overlay.Decorate(cloudProvider, op.GetClient(), op.InstanceTypeStore)
	repairPolicyMatcher := lo.Must(health.NewRepairPolicyMatcher(ctx, decorated))
	clusterState := state.NewCluster(op.Clock, op.GetClient(), decorated, state.WithRepairPolicyMatcher(repairPolicyMatcher))
	op.
		WithControllers(ctx, controllers.NewControllers(
			ctx,
			op.Manager,
			op.Clock,
			op.GetClient(),
			op.EventRecorder,
			decorated,
			cloudProvider,
			clusterState,
			op.InstanceTypeStore,
			op.PredictionStore,
		)...).
		WithControllers(ctx, provider.NewNodeClassController(op.GetClient(), cloudProvider.EC2())).
		Start(ctx)
}
