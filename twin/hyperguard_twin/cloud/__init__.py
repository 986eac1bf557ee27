"""The simulated cloud's controllers: one per system that has no open-source original
(`hyperguard_twin.cluster` is their façade), and the parts of that façade: `nodepools`,
`faults`, `inspection` and `api`."""
