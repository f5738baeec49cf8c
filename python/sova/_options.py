"""Pool options as Python users give them, checked before anything changes.

``PoolOptions`` is shared by sova.pool.Pool and sova.torch: the same names,
the same checks, the same errors (TypeError, ValueError, and OverflowError
above 2**64-1 as for every byte count of the package, naming the option).
"""
from __future__ import annotations

from dataclasses import dataclass

# sovaPolicy and sovaMemPoolFlags (include/sova/sova.h; the capi_constants_python
# test, test/capi/check_python_constants.py, compares them).
POLICIES = {"default": 0, "size_classes": 1, "buddy": 2, "best_fit": 3}
REMAP_EFFORTS = ("off", "balanced", "thorough")
FLAG_NO_STREAM_CHECKS = 0x1
FLAG_NO_REMAP = 0x2
FLAG_THOROUGH_REMAP = 0x4
FLAG_SLEEP_PIN_AHEAD = 0x20
UINT64_MAX = (1 << 64) - 1


def _check_bytes(name: str, value) -> None:
    """A byte count: an int from 0 to 2**64-1, else TypeError/ValueError/OverflowError naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"sova: {name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"sova: {name} must be >= 0, not {value}")
    if value > UINT64_MAX:
        raise OverflowError(f"sova: {name} must be at most 2**64-1, not {value}")


@dataclass(frozen=True)
class PoolOptions:
    """Options of a sova pool (docs/python.md describes each).

    release_threshold: bytes of free memory the pool keeps when idle (int >= 0,
        or None for all of it, as cudaMemPoolAttrReleaseThreshold = UINT64_MAX).
    policy: "default", "size_classes", "buddy" or "best_fit".
    remap: "balanced", "thorough" or "off" (physical remapping effort).
    stream_checks: False skips the per-call stream checks (no graph capture
        refusal; only where no stream is captured or destroyed while its frees
        are pending).
    max_size: most physical memory the pool holds, bytes; 0 = the device's.
    sleep_host_budget: most pinned host memory the pool holds for sleep's
        backups, bytes; 0 = no limit. A sleep needing more is refused
        (SovaError), the pool awake as it was.
    sleep_pin_ahead: True pins that host memory in the background as the pool
        grows (up to the budget and the pool's reserved memory), so that the
        first sleep runs at the link's speed. Off for sova.Pool (a pool that
        never sleeps must not lock host memory); on for sova.torch's tags.
    """
    release_threshold: int | None = None
    policy: str = "default"
    remap: str = "balanced"
    stream_checks: bool = True
    max_size: int = 0
    sleep_host_budget: int = 0
    sleep_pin_ahead: bool = False

    def __post_init__(self):
        rt = self.release_threshold
        if rt is not None:
            if isinstance(rt, bool) or not isinstance(rt, int):
                raise TypeError(f"sova: release_threshold must be an int or None, not {type(rt).__name__}")
            _check_bytes("release_threshold", rt)
        if self.policy not in POLICIES:
            raise ValueError(f"sova: policy must be one of {sorted(POLICIES)}, not {self.policy!r}")
        if self.remap not in REMAP_EFFORTS:
            raise ValueError(f"sova: remap must be one of {list(REMAP_EFFORTS)}, not {self.remap!r}")
        if not isinstance(self.stream_checks, bool):
            raise TypeError(f"sova: stream_checks must be a bool, not {type(self.stream_checks).__name__}")
        _check_bytes("max_size", self.max_size)
        _check_bytes("sleep_host_budget", self.sleep_host_budget)
        if not isinstance(self.sleep_pin_ahead, bool):
            raise TypeError(f"sova: sleep_pin_ahead must be a bool, not {type(self.sleep_pin_ahead).__name__}")

    @property
    def threshold_value(self) -> int:
        return UINT64_MAX if self.release_threshold is None else self.release_threshold

    @property
    def flags(self) -> int:
        flags = 0 if self.stream_checks else FLAG_NO_STREAM_CHECKS
        if self.remap == "off":
            flags |= FLAG_NO_REMAP
        elif self.remap == "thorough":
            flags |= FLAG_THOROUGH_REMAP
        if self.sleep_pin_ahead:
            flags |= FLAG_SLEEP_PIN_AHEAD
        return flags

    @property
    def policy_value(self) -> int:
        return POLICIES[self.policy]
