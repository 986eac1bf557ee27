"""Burst decisions, all pure: what the scheduling pass asks a burst for (`requests`) and
how a burst buys capacity (`plan`). The scheduling pass (`hyperguard.governance`) and the
BurstCapacity workflow's steps (`hyperguard.scaling.steps`) apply them; what capacity costs
and may be spent, and which templates may burst, is the burst policy
(`hyperguard.policies.burst`)."""
