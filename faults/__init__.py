"""Fault injection: the portal's real processes under a steady stream of work, one fault at a
time, and what was lost (goal: nothing). `make faults` runs all of them; `make test` runs the
short list (tests/faults/). See README, "Faults"."""
