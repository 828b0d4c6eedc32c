"""What a quota is counted in: GPU and MIG facts, resource classes and pools (below governance)."""
