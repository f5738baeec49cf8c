"""bench/torch/multi_gpu_sleep_wake.py's verdict, without GPUs: training passes
only when both launches reported on every rank, every cycle kept the state
intact and gave the device back at least the tags' bytes, and every rank's
losses and weights equal those of the run without sleep; the NCCL part passes
only with exact sums before and after the ordered cycle and the contents
intact on every rank, whatever the unordered cycle did."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "torch"))
import multi_gpu_sleep_wake as mgs  # noqa: E402  (imports no torch until main() or a worker runs)


def cycle(n, *, intact=True, freed=8.5, tags=8.0):
    return {"cycle": n, "trainer_gib": 4.2, "sleep_s": 0.1, "wake_s": 0.1, "sleep_gibs": 42.0,
            "wake_gibs": 42.0, "freed_gib": freed, "tags_gib": tags, "state_intact": intact}


def trained(r, *, losses=("0x1.8p+3", "0x1.6p+3"), weights="ab", cycles=None):
    return {"rank": r, "backend": "native", "losses": list(losses), "weights_sha256": weights,
            "cycles": [cycle(0), cycle(1)] if cycles is None else cycles}


def test_equal_training_with_state_intact_and_memory_back_passes(capsys):
    assert mgs.report_training([trained(0), trained(1)], [trained(0), trained(1)], 2)
    assert "NO" not in capsys.readouterr().out


def test_a_loss_that_differs_on_one_rank_fails(capsys):
    slept = [trained(0), trained(1, losses=("0x1.8p+3", "0x1.7p+3"))]
    assert not mgs.report_training([trained(0), trained(1)], slept, 2)
    assert "bitwise equal to no sleep: NO" in capsys.readouterr().out


def test_weights_that_differ_fail():
    assert not mgs.report_training([trained(0)], [trained(0, weights="cd")], 1)


def test_state_not_intact_after_a_wake_fails(capsys):
    slept = [trained(0, cycles=[cycle(0), cycle(1, intact=False)])]
    assert not mgs.report_training([trained(0)], slept, 1)
    assert " NO" in capsys.readouterr().out


def test_a_sleep_that_gives_back_less_than_the_tags_hold_fails(capsys):
    slept = [trained(0, cycles=[cycle(0, freed=7.0, tags=8.0)])]
    assert not mgs.report_training([trained(0)], slept, 1)
    assert "got back less" in capsys.readouterr().out


def test_a_rank_that_did_not_report_fails():
    assert not mgs.report_training([trained(0), trained(1)], [trained(0)], 2)


def test_a_sleep_run_with_no_cycles_fails():
    assert not mgs.report_training([trained(0)], [trained(0, cycles=[])], 1)


def test_ranks_are_compared_by_rank_not_by_order():
    assert mgs.report_training([trained(1, weights="x"), trained(0, weights="y")],
                               [trained(0, weights="y"), trained(1, weights="x")], 2)


def nccl(r, *, exact=True, after=True, intact=True, unordered=None):
    return {"rank": r, "backend": "native", "registered_exact": exact,
            "ordered": {"exact_after": after, "intact": intact},
            "unordered": unordered or {"freed_gib": 0.4, "comm_gib": 0.4, "exact_after": True, "intact": True}}


def test_nccl_exact_and_intact_passes():
    assert mgs.report_nccl([nccl(0), nccl(1)], 2)


def test_nccl_unordered_outcome_is_reported_not_judged(capsys):
    broken = {"error": "did not end (hung or crashed)"}
    assert mgs.report_nccl([nccl(0, unordered=broken), nccl(1)], 2)
    assert "did not end" in capsys.readouterr().out


def test_nccl_wrong_sum_before_or_after_or_lost_contents_fails():
    assert not mgs.report_nccl([nccl(0, exact=False)], 1)
    assert not mgs.report_nccl([nccl(0, after=False)], 1)
    assert not mgs.report_nccl([nccl(0, intact=False)], 1)


def test_nccl_missing_rank_fails():
    assert not mgs.report_nccl([nccl(0)], 2)
