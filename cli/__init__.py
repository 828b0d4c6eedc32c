"""`gpu-portal`: the portal's command line for people and CI pipelines."""
