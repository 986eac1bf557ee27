"""The BurstCapacity workflow's steps (`steps`): they apply the burst decisions of
`hyperguard.bursting`."""
