"""The `hyperguard` operator CLI (never imported by a Lambda)."""
