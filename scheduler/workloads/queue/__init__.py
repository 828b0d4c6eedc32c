"""A workload in the queue: why it waits and when it may start, borrowed units reclaimed after a
grace, work above a lowered quota."""
