// Package provider is the twin's Karpenter cloud provider for AWS: what
// github.com/aws/karpenter-provider-aws does for Karpenter's core, made small. It launches,
// finds, reboots and terminates instances through the EC2 API (the AWS emulator's, on the
// twin), so burst nodes are EC2 instances the emulator knows (their providerID
// aws:///<zone>/<instance-id>), and it labels them with the AWS provider's well-known labels.
//
// What it leaves out of the AWS provider, on purpose: launch templates and CreateFleet (an
// instance is launched with RunInstances), AMI and subnet drift, the pricing API (prices
// come with the instance types), the interruption queue (HyperGuard handles interruptions
// itself), and user data (the twin's instances register their nodes themselves, as the
// kubelet does at boot; Karpenter's registration controller then copies the NodeClaim's
// labels and taints onto the node, as it does on AWS).
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/aws/smithy-go"
	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"
)

// The tags the AWS provider puts on the instances it launches (karpenter-provider-aws
// pkg/apis/v1/labels.go), the EKS cluster's name tag among them.
var (
	NodeClaimTag   = awsv1.NodeClaimTagKey
	NodePoolTag    = awsv1.NodePoolTagKey
	NodeClassTag   = awsv1.NodeClassTagKey
	ClusterNameTag = awsv1.EKSClusterNameTagKey
)

const (
	// InstanceTypesFileEnv names the JSON file of instance types (see InstanceTypeSpec).
	InstanceTypesFileEnv = "TWIN_INSTANCE_TYPES_FILE"
	// ClusterNameEnv is the EKS cluster's name, as the AWS provider reads it.
	ClusterNameEnv = "CLUSTER_NAME"
)

var providerIDPattern = regexp.MustCompile(`^aws:///([^/]+)/(i-[0-9a-f]+)$`)

// CloudProvider launches NodeClaims as EC2 instances.
type CloudProvider struct {
	kubeClient    client.Client
	ec2           *ec2.Client
	clusterName   string
	instanceTypes []*cloudprovider.InstanceType
	byName        map[string]*cloudprovider.InstanceType
}

// New reads the instance types file and builds an EC2 client from the environment
// (AWS_ENDPOINT_URL, AWS_REGION, credentials), as the AWS SDK does everywhere.
func New(ctx context.Context, kubeClient client.Client) (*CloudProvider, error) {
	clusterName := os.Getenv(ClusterNameEnv)
	if clusterName == "" {
		return nil, fmt.Errorf("%s is not set", ClusterNameEnv)
	}
	path := os.Getenv(InstanceTypesFileEnv)
	if path == "" {
		return nil, fmt.Errorf("%s is not set", InstanceTypesFileEnv)
	}
	instanceTypes, err := ReadInstanceTypes(path)
	if err != nil {
		return nil, err
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration, %w", err)
	}
	byName := map[string]*cloudprovider.InstanceType{}
	for _, it := range instanceTypes {
		byName[it.Name] = it
	}
	return &CloudProvider{
		kubeClient:    kubeClient,
		ec2:           ec2.NewFromConfig(cfg),
		clusterName:   clusterName,
		instanceTypes: instanceTypes,
		byName:        byName,
	}, nil
}

// EC2 is the provider's EC2 client, which the node class controller shares.
func (c *CloudProvider) EC2() *ec2.Client { return c.ec2 }

// Create launches one instance for the NodeClaim: of the instance types and offerings its
// requirements allow, reserved capacity first, then spot, then on-demand, the cheapest of
// each; an insufficient-capacity answer from EC2 is Karpenter's InsufficientCapacityError.
func (c *CloudProvider) Create(ctx context.Context, nodeClaim *v1.NodeClaim) (*v1.NodeClaim, error) {
	nodeClass, err := c.nodeClass(ctx, nodeClaim)
	if err != nil {
		return nil, err
	}
	if ready := nodeClass.StatusConditions().Root(); !ready.IsTrue() {
		return nil, cloudprovider.NewNodeClassNotReadyError(errors.New(ready.Message))
	}
	instanceType, offering, err := c.choose(nodeClaim)
	if err != nil {
		return nil, err
	}
	zone := offering.Requirements.Get(corev1.LabelTopologyZone).Any()
	capacityType := offering.Requirements.Get(v1.CapacityTypeLabelKey).Any()
	subnet, ok := subnetIn(nodeClass, zone)
	if !ok {
		return nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("no subnet of EC2NodeClass %s in %s", nodeClass.Name, zone))
	}
	input := &ec2.RunInstancesInput{
		ImageId:          aws.String(nodeClass.Status.AMIs[0].ID),
		InstanceType:     ec2types.InstanceType(instanceType.Name),
		MinCount:         aws.Int32(1),
		MaxCount:         aws.Int32(1),
		SubnetId:         aws.String(subnet),
		SecurityGroupIds: securityGroupIDs(nodeClass),
		TagSpecifications: []ec2types.TagSpecification{{
			ResourceType: ec2types.ResourceTypeInstance,
			Tags:         c.tags(nodeClaim, nodeClass),
		}},
	}
	if capacityType == v1.CapacityTypeSpot {
		input.InstanceMarketOptions = &ec2types.InstanceMarketOptionsRequest{MarketType: ec2types.MarketTypeSpot}
	}
	out, err := c.ec2.RunInstances(ctx, input)
	if err != nil {
		if isInsufficientCapacity(err) {
			return nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("launching %s %s in %s, %w", capacityType, instanceType.Name, zone, err))
		}
		return nil, fmt.Errorf("launching %s %s in %s, %w", capacityType, instanceType.Name, zone, err)
	}
	if len(out.Instances) != 1 {
		return nil, fmt.Errorf("RunInstances returned %d instances", len(out.Instances))
	}
	return c.toNodeClaim(out.Instances[0], instanceType), nil
}

// Delete terminates the claim's instance; NodeClaimNotFoundError once it is gone.
func (c *CloudProvider) Delete(ctx context.Context, nodeClaim *v1.NodeClaim) error {
	id, err := instanceID(nodeClaim.Status.ProviderID)
	if err != nil {
		return cloudprovider.NewNodeClaimNotFoundError(err)
	}
	instance, err := c.instance(ctx, id)
	if err != nil {
		return err
	}
	if instance.State.Name == ec2types.InstanceStateNameShuttingDown || instance.State.Name == ec2types.InstanceStateNameTerminated {
		return cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("instance %s terminated", id))
	}
	if _, err := c.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		if isNotFound(err) {
			return cloudprovider.NewNodeClaimNotFoundError(err)
		}
		return fmt.Errorf("terminating %s, %w", id, err)
	}
	return nil
}

// Get is the NodeClaim of the instance a providerID names.
func (c *CloudProvider) Get(ctx context.Context, providerID string) (*v1.NodeClaim, error) {
	id, err := instanceID(providerID)
	if err != nil {
		return nil, cloudprovider.NewNodeClaimNotFoundError(err)
	}
	instance, err := c.instance(ctx, id)
	if err != nil {
		return nil, err
	}
	if instance.State.Name == ec2types.InstanceStateNameTerminated {
		return nil, cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("instance %s terminated", id))
	}
	return c.toNodeClaim(*instance, c.byName[string(instance.InstanceType)]), nil
}

// List is every live instance Karpenter launched for this cluster.
func (c *CloudProvider) List(ctx context.Context) ([]*v1.NodeClaim, error) {
	var claims []*v1.NodeClaim
	paginator := ec2.NewDescribeInstancesPaginator(c.ec2, &ec2.DescribeInstancesInput{
		Filters: []ec2types.Filter{
			{Name: aws.String("tag-key"), Values: []string{NodePoolTag}},
			{Name: aws.String("tag:" + ClusterNameTag), Values: []string{c.clusterName}},
			{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped", "shutting-down"}},
		},
	})
	for paginator.HasMorePages() {
		page, err := paginator.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing instances, %w", err)
		}
		for _, reservation := range page.Reservations {
			for _, instance := range reservation.Instances {
				claims = append(claims, c.toNodeClaim(instance, c.byName[string(instance.InstanceType)]))
			}
		}
	}
	return claims, nil
}

// GetInstanceTypes returns every instance type, whatever the NodePool asks.
func (c *CloudProvider) GetInstanceTypes(context.Context, *v1.NodePool) ([]*cloudprovider.InstanceType, error) {
	return c.instanceTypes, nil
}

// IsDrifted finds no provider drift: the twin's instances have no AMI or subnet to drift
// from. Karpenter's core still finds a NodeClaim drifted from its NodePool's template.
func (c *CloudProvider) IsDrifted(context.Context, *v1.NodeClaim) (cloudprovider.DriftReason, error) {
	return "", nil
}

// Reboot asks EC2 to reboot the instance in place.
func (c *CloudProvider) Reboot(ctx context.Context, nodeClaim *v1.NodeClaim, _ string) error {
	id, err := instanceID(nodeClaim.Status.ProviderID)
	if err != nil {
		return cloudprovider.NewNodeRebootFailedError(err)
	}
	if _, err := c.ec2.RebootInstances(ctx, &ec2.RebootInstancesInput{InstanceIds: []string{id}}); err != nil {
		return fmt.Errorf("rebooting %s, %w", id, err)
	}
	return nil
}

// RepairPolicies are the AWS provider's (karpenter-provider-aws
// pkg/cloudprovider/cloudprovider.go, RepairPolicies): the kubelet's Ready condition and
// the EKS node monitoring agent's conditions, an accelerator fault after 10 minutes.
func (c *CloudProvider) RepairPolicies() []cloudprovider.RepairPolicy {
	return []cloudprovider.RepairPolicy{
		{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionFalse, TolerationDuration: 30 * time.Minute},
		{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionUnknown, TolerationDuration: 30 * time.Minute},
		{ConditionType: "AcceleratedHardwareReady", ConditionStatus: corev1.ConditionFalse, TolerationDuration: 10 * time.Minute},
		{ConditionType: "StorageReady", ConditionStatus: corev1.ConditionFalse, TolerationDuration: 30 * time.Minute},
		{ConditionType: "NetworkingReady", ConditionStatus: corev1.ConditionFalse, TolerationDuration: 30 * time.Minute},
		{ConditionType: "KernelReady", ConditionStatus: corev1.ConditionFalse, TolerationDuration: 30 * time.Minute},
		{ConditionType: "ContainerRuntimeReady", ConditionStatus: corev1.ConditionFalse, TolerationDuration: 30 * time.Minute},
	}
}

// Name is the AWS provider's.
func (c *CloudProvider) Name() string { return "aws" }

// GetSupportedNodeClasses is the AWS provider's one node class.
func (c *CloudProvider) GetSupportedNodeClasses() []status.Object {
	return []status.Object{&awsv1.EC2NodeClass{}}
}

func (c *CloudProvider) nodeClass(ctx context.Context, nodeClaim *v1.NodeClaim) (*awsv1.EC2NodeClass, error) {
	ref := nodeClaim.Spec.NodeClassRef
	if ref == nil || ref.Kind != "EC2NodeClass" {
		return nil, cloudprovider.NewInsufficientCapacityError(errors.New("the NodeClaim names no EC2NodeClass"))
	}
	nodeClass := &awsv1.EC2NodeClass{}
	if err := c.kubeClient.Get(ctx, client.ObjectKey{Name: ref.Name}, nodeClass); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("EC2NodeClass %s not found", ref.Name))
		}
		return nil, fmt.Errorf("reading EC2NodeClass %s, %w", ref.Name, err)
	}
	return nodeClass, nil
}

// choose picks the instance type and offering for a claim: among those its requirements
// allow and that are available, the capacity type first (reserved, spot, on-demand), then
// the price.
func (c *CloudProvider) choose(nodeClaim *v1.NodeClaim) (*cloudprovider.InstanceType, *cloudprovider.Offering, error) {
	requirements := scheduling.NewNodeSelectorRequirementsWithMinValues(nodeClaim.Spec.Requirements...)
	rank := map[string]int{v1.CapacityTypeReserved: 0, v1.CapacityTypeSpot: 1, v1.CapacityTypeOnDemand: 2}
	var bestType *cloudprovider.InstanceType
	var best *cloudprovider.Offering
	for _, it := range c.instanceTypes {
		if !requirements.Get(corev1.LabelInstanceTypeStable).Has(it.Name) {
			continue
		}
		if err := requirements.Compatible(it.Requirements, scheduling.AllowUndefinedWellKnownLabels); err != nil {
			continue
		}
		for _, offering := range it.Offerings.Available().Compatible(requirements) {
			capacity := offering.Requirements.Get(v1.CapacityTypeLabelKey).Any()
			if best == nil {
				best, bestType = offering, it
				continue
			}
			current := best.Requirements.Get(v1.CapacityTypeLabelKey).Any()
			if rank[capacity] < rank[current] || (rank[capacity] == rank[current] && offering.Price < best.Price) {
				best, bestType = offering, it
			}
		}
	}
	if best == nil {
		return nil, nil, cloudprovider.NewInsufficientCapacityError(errors.New("no instance type offering satisfies the NodeClaim's requirements"))
	}
	return bestType, best, nil
}

func (c *CloudProvider) tags(nodeClaim *v1.NodeClaim, nodeClass *awsv1.EC2NodeClass) []ec2types.Tag {
	tags := map[string]string{
		NodeClaimTag:                             nodeClaim.Name,
		NodePoolTag:                              nodeClaim.Labels[v1.NodePoolLabelKey],
		NodeClassTag:                             nodeClass.Name,
		ClusterNameTag:                           c.clusterName,
		"kubernetes.io/cluster/" + c.clusterName: "owned",
		"Name":                                   fmt.Sprintf("%s/%s", nodeClaim.Labels[v1.NodePoolLabelKey], nodeClaim.Name),
	}
	for key, value := range nodeClass.Spec.Tags {
		if _, taken := tags[key]; !taken {
			tags[key] = value
		}
	}
	keys := make([]string, 0, len(tags))
	for key := range tags {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	out := make([]ec2types.Tag, 0, len(keys))
	for _, key := range keys {
		out = append(out, ec2types.Tag{Key: aws.String(key), Value: aws.String(tags[key])})
	}
	return out
}

func (c *CloudProvider) instance(ctx context.Context, id string) (*ec2types.Instance, error) {
	out, err := c.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		if isNotFound(err) {
			return nil, cloudprovider.NewNodeClaimNotFoundError(err)
		}
		return nil, fmt.Errorf("describing %s, %w", id, err)
	}
	for _, reservation := range out.Reservations {
		for i := range reservation.Instances {
			return &reservation.Instances[i], nil
		}
	}
	return nil, cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("instance %s not found", id))
}

// toNodeClaim is the NodeClaim an instance stands for, with the labels the AWS provider
// resolves for it (its instance type's, its zone, region and capacity type).
func (c *CloudProvider) toNodeClaim(instance ec2types.Instance, instanceType *cloudprovider.InstanceType) *v1.NodeClaim {
	zone := aws.ToString(instance.Placement.AvailabilityZone)
	labels := map[string]string{
		corev1.LabelTopologyZone:       zone,
		corev1.LabelTopologyRegion:     strings.TrimRight(zone, "abcdefghijklmnopqrstuvwxyz"),
		corev1.LabelInstanceTypeStable: string(instance.InstanceType),
		v1.CapacityTypeLabelKey:        v1.CapacityTypeOnDemand,
	}
	if instance.InstanceLifecycle == ec2types.InstanceLifecycleTypeSpot {
		labels[v1.CapacityTypeLabelKey] = v1.CapacityTypeSpot
	}
	claim := &v1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{}},
		Status: v1.NodeClaimStatus{
			ProviderID: fmt.Sprintf("aws:///%s/%s", zone, aws.ToString(instance.InstanceId)),
			ImageID:    aws.ToString(instance.ImageId),
		},
	}
	for _, tag := range instance.Tags {
		switch aws.ToString(tag.Key) {
		case NodeClaimTag:
			claim.Name = aws.ToString(tag.Value)
		case NodePoolTag:
			labels[v1.NodePoolLabelKey] = aws.ToString(tag.Value)
		case NodeClassTag:
			labels[NodeClassTag] = aws.ToString(tag.Value)
		}
	}
	if instance.LaunchTime != nil {
		claim.CreationTimestamp = metav1.NewTime(*instance.LaunchTime)
	}
	if instanceType != nil {
		for key, requirement := range instanceType.Requirements {
			if requirement.Len() == 1 && requirement.Operator() == corev1.NodeSelectorOpIn {
				if _, set := labels[key]; !set {
					labels[key] = requirement.Values()[0]
				}
			}
		}
		claim.Status.Capacity = instanceType.Capacity
		claim.Status.Allocatable = instanceType.Allocatable()
	}
	return claim
}

func subnetIn(nodeClass *awsv1.EC2NodeClass, zone string) (string, bool) {
	for _, subnet := range nodeClass.Status.Subnets {
		if subnet.Zone == zone {
			return subnet.ID, true
		}
	}
	return "", false
}

func securityGroupIDs(nodeClass *awsv1.EC2NodeClass) []string {
	ids := make([]string, 0, len(nodeClass.Status.SecurityGroups))
	for _, group := range nodeClass.Status.SecurityGroups {
		ids = append(ids, group.ID)
	}
	return ids
}

func instanceID(providerID string) (string, error) {
	match := providerIDPattern.FindStringSubmatch(providerID)
	if match == nil {
		return "", fmt.Errorf("providerID %q is not aws:///<zone>/<instance-id>", providerID)
	}
	return match[2], nil
}

func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

func isInsufficientCapacity(err error) bool {
	switch errorCode(err) {
	case "InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientReservedInstanceCapacity", "InsufficientCapacity", "MaxSpotInstanceCountExceeded", "UnfulfillableCapacity":
		return true
	}
	return false
}

func isNotFound(err error) bool {
	return errorCode(err) == "InvalidInstanceID.NotFound"
}

// InstanceTypeSpec is one entry of the instance types file: what EC2's DescribeInstanceTypes
// says of the type (resources as the kubelet and device plugins advertise them, the AWS
// provider's labels), the kubelet's reserved share, and where it is offered at what price.
type InstanceTypeSpec struct {
	Name         string              `json:"name"`
	Architecture string              `json:"architecture"`
	Capacity     corev1.ResourceList `json:"capacity"`
	KubeReserved corev1.ResourceList `json:"kubeReserved"`
	Eviction     corev1.ResourceList `json:"evictionThreshold"`
	Labels       map[string]string   `json:"labels"`
	Offerings    []OfferingSpec      `json:"offerings"`
}

// OfferingSpec is one zone and capacity type of an instance type, its hourly price, and
// whether EC2 offers it.
type OfferingSpec struct {
	Zone         string  `json:"zone"`
	CapacityType string  `json:"capacityType"`
	Price        float64 `json:"price"`
	Available    bool    `json:"available"`
}

// ReadInstanceTypes reads the instance types file.
func ReadInstanceTypes(path string) ([]*cloudprovider.InstanceType, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the instance types, %w", err)
	}
	var specs []InstanceTypeSpec
	if err := json.Unmarshal(raw, &specs); err != nil {
		return nil, fmt.Errorf("parsing %s, %w", path, err)
	}
	out := make([]*cloudprovider.InstanceType, 0, len(specs))
	for _, spec := range specs {
		out = append(out, newInstanceType(spec))
	}
	return out, nil
}

func newInstanceType(spec InstanceTypeSpec) *cloudprovider.InstanceType {
	var zones, capacityTypes []string
	offerings := make(cloudprovider.Offerings, 0, len(spec.Offerings))
	for _, o := range spec.Offerings {
		zones = append(zones, o.Zone)
		capacityTypes = append(capacityTypes, o.CapacityType)
		offerings = append(offerings, &cloudprovider.Offering{
			Requirements: scheduling.NewRequirements(
				scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, o.Zone),
				scheduling.NewRequirement(v1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, o.CapacityType),
			),
			Price:     o.Price,
			Available: o.Available,
		})
	}
	requirements := scheduling.NewRequirements(
		scheduling.NewRequirement(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, spec.Name),
		scheduling.NewRequirement(corev1.LabelArchStable, corev1.NodeSelectorOpIn, spec.Architecture),
		scheduling.NewRequirement(corev1.LabelOSStable, corev1.NodeSelectorOpIn, string(corev1.Linux)),
		scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, slices.Compact(slices.Sorted(slices.Values(zones)))...),
		scheduling.NewRequirement(v1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, slices.Compact(slices.Sorted(slices.Values(capacityTypes)))...),
	)
	for key, value := range spec.Labels {
		v1.WellKnownLabels = v1.WellKnownLabels.Insert(key)
		requirements.Add(scheduling.NewRequirement(key, corev1.NodeSelectorOpIn, value))
	}
	return &cloudprovider.InstanceType{
		Name:         spec.Name,
		Requirements: requirements,
		Offerings:    offerings,
		Capacity:     spec.Capacity,
		Overhead: &cloudprovider.InstanceTypeOverhead{
			KubeReserved:      withZero(spec.KubeReserved),
			SystemReserved:    corev1.ResourceList{},
			EvictionThreshold: withZero(spec.Eviction),
		},
	}
}

func withZero(list corev1.ResourceList) corev1.ResourceList {
	if list == nil {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0")}
	}
	return list
}
