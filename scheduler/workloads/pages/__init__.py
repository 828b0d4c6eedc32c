"""Workloads in the browser: the pages, their forms and what they say in words."""
