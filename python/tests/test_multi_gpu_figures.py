"""bench/torch/multi_gpu_train.py's figures, without GPUs: a group's round
figure is the mean over ranks of each rank's median step, the ratio to native
is taken round by round (native's figure of the same round), and the summary
flags a bitwise difference and reports recordStream counts per rank."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "torch"))
import multi_gpu_train as mgt  # noqa: E402  (imports no torch until main() or a worker runs)


def group(tmp_path, allocator, round_ms, sha="same", calls=None):
    g = mgt.TrainGroup("ddp", allocator, str(tmp_path / allocator), 2, 3, len(round_ms))
    # Each round: rank 0's steps around the figure, rank 1's 2 ms slower; medians m and m + 2.
    g.rounds = [[{"count": 3, "step_ms": [m - 5, m, m + 9], "wall_ms_per_step": m, "counters": {"allocations": 30}},
                 {"count": 3, "step_ms": [m + 2, m + 2, m - 1], "wall_ms_per_step": m, "counters": {"allocations": 30}}]
                for m in round_ms]
    counters = {} if calls is None else {"recordStreamCalls": calls, "recordStreamWaits": 0}
    g.final = [{"peak_reserved": 2 << 30, "alloc_free_us": 9.0, "losses_sha": sha, "weights_sha": "w",
                "run_counters": counters, "avoid_record_streams": "(unset)"} for _ in range(2)]
    return g


def test_round_figure_is_the_mean_of_the_ranks_medians(tmp_path):
    g = group(tmp_path, "native", [40.0])
    assert mgt.round_figure(g.rounds[0]) == pytest.approx(41.0)


def test_ratios_to_native_are_taken_within_each_round(tmp_path):
    native = group(tmp_path, "native", [40.0, 50.0, 38.0])
    sova = group(tmp_path, "sova", [42.0, 51.0, 37.0], calls=5)
    rows = {r["allocator"]: r for r in mgt.summarize([native, sova], ["ddp"])}
    want = [43 / 41, 52 / 51, 38 / 39]
    assert rows["sova"]["ms_vs_native_per_round"] == pytest.approx(want)
    assert rows["sova"]["ms_vs_native"]["median"] == pytest.approx(sorted(want)[1])
    assert rows["sova"]["ms_vs_native"]["min"] == pytest.approx(min(want))
    assert rows["sova"]["ms_vs_native"]["max"] == pytest.approx(max(want))
    # Medians over rounds alone would say 43 against 41: the pairing is what the ratio reports.
    assert rows["sova"]["ms"]["median"] == pytest.approx(43.0)
    assert rows["sova"]["bitwise_equal"] is True
    assert rows["sova"]["allocs_per_step"] == pytest.approx(10.0)
    assert rows["sova"]["record_stream_calls_per_rank"] == [5, 5]
    assert rows["sova"]["record_stream_calls_total"] == 10
    assert rows["native"]["record_stream_calls_total"] is None


def test_a_bitwise_difference_and_a_failed_group_are_reported(tmp_path):
    native = group(tmp_path, "native", [40.0])
    expandable = group(tmp_path, "expandable", [39.0], sha="other")
    broken = group(tmp_path, "sova", [41.0])
    broken.failure = "round 1: steps: exited 1"
    rows = {r["allocator"]: r for r in mgt.summarize([native, expandable, broken], ["ddp"])}
    assert rows["expandable"]["bitwise_equal"] is False
    assert rows["sova"]["failure"] == "round 1: steps: exited 1" and "ms" not in rows["sova"]


def test_the_plan_keeps_ddp_only_allocators_out_of_fsdp():
    plan = mgt.plan_groups(["ddp", "fsdp"], ["native", "sova_nochecks", "sova_recstream", "native_again"])
    assert plan == [("ddp", "native"), ("ddp", "sova_nochecks"), ("ddp", "sova_recstream"), ("ddp", "native_again"),
                    ("fsdp", "native"), ("fsdp", "native_again")]
