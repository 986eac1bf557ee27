package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// NodeClassController resolves each EC2NodeClass's selector terms through EC2, writes what
// they resolved to in its status and marks it Ready, as the AWS provider's node class status
// controller does (karpenter-provider-aws pkg/controllers/nodeclass): subnets and security
// groups by id or tags; AMIs by id, name or tags, an alias (al2023@latest) standing for the
// newest EKS optimized AMI of its family (found by name, where the AWS provider reads an SSM
// parameter); a role or an instance profile must be named. Capacity reservations and
// placement groups are not resolved (none is used on the twin).
type NodeClassController struct {
	kubeClient client.Client
	ec2        *ec2.Client
}

func NewNodeClassController(kubeClient client.Client, ec2Client *ec2.Client) *NodeClassController {
	return &NodeClassController{kubeClient: kubeClient, ec2: ec2Client}
}

func (c *NodeClassController) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named("twin.nodeclass.status").
		For(&awsv1.EC2NodeClass{}).
		Complete(reconcile.AsReconciler(m.GetClient(), c))
}

func (c *NodeClassController) Reconcile(ctx context.Context, nodeClass *awsv1.EC2NodeClass) (reconcile.Result, error) {
	stored := nodeClass.DeepCopy()
	conditions := nodeClass.StatusConditions()
	subnets, err := c.subnets(ctx, nodeClass.Spec.SubnetSelectorTerms)
	if err != nil {
		return reconcile.Result{}, err
	}
	nodeClass.Status.Subnets = subnets
	markFound(conditions, awsv1.ConditionTypeSubnetsReady, len(subnets), "SubnetsNotFound", "SubnetSelector did not match any Subnets")
	groups, err := c.securityGroups(ctx, nodeClass.Spec.SecurityGroupSelectorTerms)
	if err != nil {
		return reconcile.Result{}, err
	}
	nodeClass.Status.SecurityGroups = groups
	markFound(conditions, awsv1.ConditionTypeSecurityGroupsReady, len(groups), "SecurityGroupsNotFound", "SecurityGroupSelector did not match any SecurityGroups")
	amis, err := c.amis(ctx, nodeClass.Spec.AMISelectorTerms)
	if err != nil {
		return reconcile.Result{}, err
	}
	nodeClass.Status.AMIs = amis
	markFound(conditions, awsv1.ConditionTypeAMIsReady, len(amis), "AMINotFound", "AMISelector did not match any AMIs")
	profile := aws.ToString(nodeClass.Spec.InstanceProfile)
	if profile == "" && nodeClass.Spec.Role != "" {
		profile = fmt.Sprintf("%s_%s", nodeClass.Name, nodeClass.Spec.Role)
	}
	nodeClass.Status.InstanceProfile = profile
	markFound(conditions, awsv1.ConditionTypeInstanceProfileReady, len(profile), "InstanceProfileNotFound", "neither a role nor an instance profile is named")
	conditions.SetTrue(awsv1.ConditionTypePlacementGroupReady)
	conditions.SetTrue(awsv1.ConditionTypeValidationSucceeded)
	if err := c.kubeClient.Status().Patch(ctx, nodeClass, client.MergeFrom(stored)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	// The AWS provider resolves its selector terms again on a period: images and subnets change.
	return reconcile.Result{RequeueAfter: time.Minute}, nil
}

func markFound(conditions status.ConditionSet, condition string, found int, reason, message string) {
	if found > 0 {
		conditions.SetTrue(condition)
		return
	}
	conditions.SetFalse(condition, reason, message)
}

func tagFilters(tags map[string]string) []ec2types.Filter {
	var filters []ec2types.Filter
	for key, value := range tags {
		if value == "*" {
			filters = append(filters, ec2types.Filter{Name: aws.String("tag-key"), Values: []string{key}})
		} else {
			filters = append(filters, ec2types.Filter{Name: aws.String("tag:" + key), Values: []string{value}})
		}
	}
	return filters
}

func (c *NodeClassController) subnets(ctx context.Context, terms []awsv1.SubnetSelectorTerm) ([]awsv1.Subnet, error) {
	var out []awsv1.Subnet
	for _, term := range terms {
		input := &ec2.DescribeSubnetsInput{Filters: tagFilters(term.Tags)}
		if term.ID != "" {
			input = &ec2.DescribeSubnetsInput{SubnetIds: []string{term.ID}}
		}
		page, err := c.ec2.DescribeSubnets(ctx, input)
		if err != nil {
			return nil, fmt.Errorf("describing subnets, %w", err)
		}
		for _, subnet := range page.Subnets {
			out = append(out, awsv1.Subnet{ID: aws.ToString(subnet.SubnetId), Zone: aws.ToString(subnet.AvailabilityZone), ZoneID: aws.ToString(subnet.AvailabilityZoneId)})
		}
	}
	slices.SortFunc(out, func(a, b awsv1.Subnet) int { return strings.Compare(a.Zone+a.ID, b.Zone+b.ID) })
	return slices.CompactFunc(out, func(a, b awsv1.Subnet) bool { return a.ID == b.ID }), nil
}

func (c *NodeClassController) securityGroups(ctx context.Context, terms []awsv1.SecurityGroupSelectorTerm) ([]awsv1.SecurityGroup, error) {
	var out []awsv1.SecurityGroup
	for _, term := range terms {
		input := &ec2.DescribeSecurityGroupsInput{Filters: tagFilters(term.Tags)}
		switch {
		case term.ID != "":
			input = &ec2.DescribeSecurityGroupsInput{GroupIds: []string{term.ID}}
		case term.Name != "":
			input.Filters = append(input.Filters, ec2types.Filter{Name: aws.String("group-name"), Values: []string{term.Name}})
		}
		page, err := c.ec2.DescribeSecurityGroups(ctx, input)
		if err != nil {
			return nil, fmt.Errorf("describing security groups, %w", err)
		}
		for _, group := range page.SecurityGroups {
			out = append(out, awsv1.SecurityGroup{ID: aws.ToString(group.GroupId), Name: aws.ToString(group.GroupName)})
		}
	}
	slices.SortFunc(out, func(a, b awsv1.SecurityGroup) int { return strings.Compare(a.ID, b.ID) })
	return slices.CompactFunc(out, func(a, b awsv1.SecurityGroup) bool { return a.ID == b.ID }), nil
}

// amiNamePrefixes are the name prefixes of the EKS optimized AMIs an alias's family stands for.
var amiNamePrefixes = map[string]string{
	"al2023":       "amazon-eks-node-al2023-",
	"al2":          "amazon-eks-node-",
	"bottlerocket": "bottlerocket-aws-k8s-",
}

func (c *NodeClassController) amis(ctx context.Context, terms []awsv1.AMISelectorTerm) ([]awsv1.AMI, error) {
	var out []awsv1.AMI
	for _, term := range terms {
		input := &ec2.DescribeImagesInput{Filters: tagFilters(term.Tags)}
		switch {
		case term.ID != "":
			input = &ec2.DescribeImagesInput{ImageIds: []string{term.ID}}
		case term.Name != "":
			input.Filters = append(input.Filters, ec2types.Filter{Name: aws.String("name"), Values: []string{term.Name}})
		case term.Alias != "":
			family, _, _ := strings.Cut(term.Alias, "@")
			prefix, ok := amiNamePrefixes[family]
			if !ok {
				continue
			}
			input.Filters = append(input.Filters, ec2types.Filter{Name: aws.String("name"), Values: []string{prefix + "*"}})
		}
		if term.Owner != "" {
			input.Owners = []string{term.Owner}
		}
		page, err := c.ec2.DescribeImages(ctx, input)
		if err != nil {
			return nil, fmt.Errorf("describing images, %w", err)
		}
		images := page.Images
		slices.SortFunc(images, func(a, b ec2types.Image) int {
			return strings.Compare(aws.ToString(b.CreationDate), aws.ToString(a.CreationDate))
		})
		for _, image := range images {
			out = append(out, awsv1.AMI{
				ID:   aws.ToString(image.ImageId),
				Name: aws.ToString(image.Name),
				Requirements: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{archOf(image.Architecture)},
				}},
			})
			if term.Alias != "" {
				break // an alias stands for one image: the newest
			}
		}
	}
	return out, nil
}

func archOf(architecture ec2types.ArchitectureValues) string {
	if architecture == ec2types.ArchitectureValuesArm64 {
		return "arm64"
	}
	return "amd64"
}
