"""The simulated cloud's controllers: one per system that has no open-source original
(`hyperguard_twin.cluster` is their façade)."""
