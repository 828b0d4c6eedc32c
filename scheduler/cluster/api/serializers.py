"""A cluster as the API shows it (its kubeconfig Secret by reference only, never its contents)
and what the platform team may send to register or change one."""

from __future__ import annotations

from rest_framework import serializers

from scheduler.cluster.models import Cluster


class ClusterSerializer(serializers.ModelSerializer):
    # Said in words rather than as a choice set: its enum would take the name of the team
    # roles' (both fields are `role`) in the schema.
    role = serializers.CharField(read_only=True, help_text="standalone, manager or worker")
    credentials_secret = serializers.CharField(
        read_only=True, help_text="namespace/name of its kubeconfig Secret on the manager"
    )

    class Meta:
        model = Cluster
        fields = [
            "name",
            "role",
            "region",
            "preference",
            "group",
            "price_factor",
            "credentials_secret",
            "api_server",
            "server_version",
            "reachable",
            "kueue_version",
            "last_error",
            "checked_at",
            "last_sync_at",
            "archived_at",
        ]
        read_only_fields = fields


class ClusterWriteSerializer(serializers.Serializer):
    """Types only; the service says what is wrong with the values (fleet.py)."""

    name = serializers.CharField(max_length=63, required=False)
    role = serializers.CharField(max_length=20, required=False)
    region = serializers.CharField(max_length=63, required=False, allow_blank=True)
    preference = serializers.IntegerField(
        required=False, help_text="lower first: MultiKueue tries workers in this order (0-1000)"
    )
    group = serializers.CharField(max_length=63, required=False, allow_blank=True)
    # Text or a number: the service says what is wrong with it (fleet.py).
    price_factor = serializers.CharField(
        max_length=40,
        required=False,
        help_text="its GPU hours cost this many times the class's list price: above 0, at most "
        "100, to 3 places (1: the list price)",
    )
    credentials_secret_namespace = serializers.CharField(
        max_length=63,
        required=False,
        allow_blank=True,
        help_text="where its kubeconfig Secret is (empty: Kueue's namespace, where MultiKueue "
        "reads it)",
    )
    credentials_secret_name = serializers.CharField(
        max_length=253,
        required=False,
        allow_blank=True,
        help_text="a Secret on the manager holding the worker's kubeconfig under the key "
        "`kubeconfig`, certificates embedded",
    )
