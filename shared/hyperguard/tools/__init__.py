"""Developer tools (not imported by Lambdas)."""
