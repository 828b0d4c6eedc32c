from django.conf import settings

from scheduler.mig import layouts

CONFIGS = layouts.load_mig_configs(str(settings.MIG_PARTED_CONFIG))


def test_seed_mixed_layout_of_the_a100():
    gpus = layouts.gpu_layouts("A100-80GB", 4, "mixed", 1, CONFIGS)
    assert [g.mode for g in gpus] == ["mig", "mig", "whole", "whole"]
    assert [(i.profile, i.start, i.compute_slices) for i in gpus[0].instances] == [
        ("3g.40gb", 0, 3),
        ("3g.40gb", 3, 3),
    ]
    assert len(gpus[1].instances) == 7


def test_time_sliced_gpus_show_their_replicas_and_unknown_configs_read_whole():
    shared = layouts.gpu_layouts("L40S-48GB", 4, "", 4, CONFIGS)
    assert all(g.mode == "shared" and len(g.instances) == 4 for g in shared)
    assert layouts.gpu_layouts("H200-141GB", 2, "no-such-config", 1, CONFIGS)[0].mode == "whole"


def test_a_node_sharing_some_gpus_draws_replicas_only_on_those():
    gpus = layouts.gpu_layouts("L40S-48GB", 4, "", [4, 4, 1, 1], CONFIGS)
    assert [(g.mode, len(g.instances)) for g in gpus] == [
        ("shared", 4),
        ("shared", 4),
        ("whole", 1),
        ("whole", 1),
    ]
    held = {"nvidia.com/gpu.shared": [("team-a", 1)], "nvidia.com/gpu": [("team-b", 1)]}
    drawn = layouts.assign_tenants(gpus, held)
    assert [b.tenant for b in drawn[0].blocks] == ["team-a", "", "", ""]
    assert [b.tenant for b in drawn[1].blocks] == ["", "", "", ""]
    assert [b.tenant for b in drawn[2].blocks] == ["team-b"]


def test_tenants_get_instances_in_gpu_order_and_free_slices_show():
    gpus = layouts.gpu_layouts("A100-80GB", 4, "mixed", 1, CONFIGS)
    drawn = layouts.assign_tenants(
        gpus,
        {
            "nvidia.com/mig-1g.10gb": [("team-a", 2), ("team-b", 1)],
            "nvidia.com/gpu": [("team-c", 1)],
        },
    )
    assert [b.tenant for b in drawn[1].blocks] == ["team-a", "team-a", "team-b", "", "", "", ""]
    assert drawn[0].free_slices == 1  # 3g + 3g leave one compute slice unused
    assert [b.tenant for b in drawn[2].blocks] == ["team-c"]
    assert drawn[3].blocks[0].tenant == ""


def test_colours_are_stable_and_distinct():
    colours = layouts.tenant_colours(["b", "a", "c", "a"])
    assert list(colours) == ["a", "b", "c"] and len(set(colours.values())) == 3
    assert layouts.tenant_colours(["a", "b", "c"]) == colours


def test_a_holder_that_says_more_than_the_tenant_stays_on_its_block():
    gpus = layouts.gpu_layouts("A100-80GB", 4, "mixed", 1, CONFIGS)
    train = layouts.Holder("team-a", workload=7, workload_name="train-7")
    serving = layouts.Holder("ml-serving", namespace="ml-serving", outside=True)
    drawn = layouts.assign_tenants(
        gpus,
        {
            "nvidia.com/mig-1g.10gb": [(train, 1), ("team-b", 1)],
            "nvidia.com/gpu": [(serving, 1)],
        },
        {("nvidia.com/mig-1g.10gb", "team-a"): 1},
    )
    first, second = drawn[1].blocks[:2]
    assert (first.tenant, first.holder, first.borrowed) == ("team-a", train, True)
    assert (second.tenant, second.holder) == ("team-b", None)  # a plain slug says no more
    assert (drawn[2].blocks[0].tenant, drawn[2].blocks[0].holder) == ("ml-serving", serving)
