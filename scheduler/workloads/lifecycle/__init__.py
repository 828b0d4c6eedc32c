"""A workload's life on the cluster: create and follow it, the periodic watch, idle suspension, what
a lost delete leaves, its pods and logs."""
