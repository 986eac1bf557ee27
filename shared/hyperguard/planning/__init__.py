"""Planning models beyond the published reliability analysis (hyperguard.planner): the
committed baseline to buy (commitment) and the deployment's own recovery figures (measured).
Pure functions on plain values: no AWS, no I/O."""

MIN_INCIDENTS = 3
"""A measured figure needs this many incidents behind it, as the recovery strategy's
MIN_SAMPLES: with fewer, one odd incident is the whole figure."""
