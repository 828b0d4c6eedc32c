"""The workloads REST API: serializers, views and routes."""
