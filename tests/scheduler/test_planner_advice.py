"""Sharing-mode advice from the seed's decision tree."""

from catalog.advice import sharing_advice


def modes(**kwargs):
    return [(a.workload, a.mode) for a in sharing_advice(**kwargs)]


def test_inference_gets_a_mig_slice_or_time_slicing():
    assert modes(model_key="A100-80GB", workload="inference") == [
        ("inference", "mig"),
        ("inference", "time-slicing"),
    ]
    advice = sharing_advice(model_key="A100-80GB", workload="inference")[0]
    assert advice.resource_class == "a100-80gb-mig-1g.10gb"


def test_training_gets_mps_or_a_whole_gpu():
    assert modes(model_key="H100-80GB", workload="training") == [
        ("training", "mps"),
        ("training", "whole"),
    ]


def test_strict_isolation_is_mig_only_or_whole_without_mig():
    assert modes(model_key="H200-141GB", workload="inference", strict_isolation=True) == [
        ("inference", "mig")
    ]
    assert modes(model_key="L40S-48GB", workload="training", strict_isolation=True) == [
        ("training", "whole")
    ]


def test_no_mig_on_the_model_means_time_slicing_or_mps():
    assert modes(model_key="RTX4090-24GB") == [
        ("inference", "time-slicing"),
        ("training", "mps"),
        ("training", "whole"),
    ]
