"""Elastic layouts as the API shows them, and what a platform admin may set."""

from __future__ import annotations

from rest_framework import serializers


class ElasticLayoutSerializer(serializers.Serializer):
    gpu_model = serializers.CharField(read_only=True)
    paused = serializers.BooleanField(read_only=True)
    min_wait_s = serializers.IntegerField(read_only=True)
    max_gpus_per_hour = serializers.IntegerField(read_only=True)
    gpus_reshaped_last_hour = serializers.IntegerField(read_only=True)
    configured = serializers.BooleanField(
        read_only=True, help_text="set for this model; false: the settings' defaults"
    )


class ElasticLayoutUpdateSerializer(serializers.Serializer):
    paused = serializers.BooleanField()
    # The service checks the ranges and says what to change (a 400 naming the field).
    min_wait_s = serializers.IntegerField(min_value=0, max_value=7 * 24 * 3600)
    max_gpus_per_hour = serializers.IntegerField(min_value=0, max_value=10_000)
