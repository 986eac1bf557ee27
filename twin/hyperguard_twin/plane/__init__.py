"""The twin's Kubernetes: the upstream control plane, Kueue, Karpenter and KWOK, built from
their Go modules and run on 127.0.0.1."""
