"""Node recovery: the steps the NodeRecovery state machine runs."""
