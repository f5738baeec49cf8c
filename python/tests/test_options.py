"""sova.PoolOptions: bad values are refused before anything is made."""
import pytest

from sova import PoolOptions


@pytest.mark.parametrize("kwargs, error, words", [
    ({"release_threshold": -1}, ValueError, "release_threshold"),
    ({"release_threshold": 1 << 64}, OverflowError, "release_threshold"),
    ({"release_threshold": 1.5}, TypeError, "release_threshold"),
    ({"release_threshold": True}, TypeError, "release_threshold"),
    ({"policy": "first_fit"}, ValueError, "policy"),
    ({"remap": "always"}, ValueError, "remap"),
    ({"stream_checks": 0}, TypeError, "stream_checks"),
    ({"max_size": -5}, ValueError, "max_size"),
    ({"max_size": "1G"}, TypeError, "max_size"),
    ({"sleep_host_budget": -1}, ValueError, "sleep_host_budget"),
    ({"sleep_host_budget": "1G"}, TypeError, "sleep_host_budget"),
    ({"sleep_host_budget": 1 << 64}, OverflowError, "sleep_host_budget"),
    ({"sleep_pin_ahead": 1}, TypeError, "sleep_pin_ahead"),
])
def test_bad_options_name_the_option(kwargs, error, words):
    with pytest.raises(error, match=words):
        PoolOptions(**kwargs)


def test_unknown_option_is_a_type_error():
    with pytest.raises(TypeError):
        PoolOptions(release_treshold=0)


def test_options_become_the_c_flags():
    assert PoolOptions().flags == 0
    assert PoolOptions(stream_checks=False).flags == 0x1
    assert PoolOptions(remap="off").flags == 0x2
    assert PoolOptions(remap="thorough", stream_checks=False).flags == 0x5
    assert PoolOptions().threshold_value == (1 << 64) - 1   # None: keep all, as PyTorch does
    assert PoolOptions(release_threshold=0).threshold_value == 0
    assert PoolOptions(policy="buddy").policy_value == 2
    assert PoolOptions(sleep_pin_ahead=True).flags == 0x20   # sovaMemPoolSleepPinAhead


def test_pin_ahead_is_off_for_pools_and_on_for_torch_tags():
    from sova.torch import TORCH_DEFAULTS
    assert PoolOptions().sleep_pin_ahead is False and PoolOptions().sleep_host_budget == 0
    assert TORCH_DEFAULTS["sleep_pin_ahead"] is True
    assert TORCH_DEFAULTS["sleep_host_budget"] > 0   # half the host's physical memory
