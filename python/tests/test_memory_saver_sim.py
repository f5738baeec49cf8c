"""sova's torch_memory_saver drop-in (sova.memory_saver) on the host
simulation, without PyTorch: its torch-free part (sova._memory_saver_state)
driven with allocations made as a region's torch.cuda.MemPool makes its
segments (sova_torch_malloc_nothrow under the tag's sova.torch tag), and the
public object's argument checks and its PYTHONPATH package. The GPU suite
(python/tests_gpu/test_memory_saver_gpu.py) runs it through PyTorch."""
import os
import subprocess
import sys

from sim_helpers import run_py

PRELUDE = """
    import ctypes, sova, sova.torch as st, sova._capi as c
    from sova import _memory_saver_state as ms
    tl = c.torch_lib()
    MiB = 1 << 20
    def alloc_under(saver, tag, backup, n):   # as a region's MemPool asks for a segment
        name = saver.use(tag, backup)
        with st.tag(name):
            p = tl.sova_torch_malloc_nothrow(n, 0, ctypes.c_void_p(0))
        assert p, st.last_error()
        return p
    def untagged(n):
        p = tl.sova_torch_malloc_nothrow(n, 0, ctypes.c_void_p(0))
        assert p, st.last_error()
        return p
    def stats(tag, backup):
        return st.tag_stats(ms.sova_tag(tag, backup), 0)
"""


def test_pause_keeps_backed_up_regions_and_zeroes_the_rest_at_the_same_addresses():
    run_py(PRELUDE + """
    s = ms.Saver()
    kept = alloc_under(s, "weights", True, 3 * MiB)
    dropped = alloc_under(s, "weights", False, 2 * MiB)
    other = untagged(MiB)
    ctypes.memset(kept, 0x42, 3 * MiB)
    ctypes.memset(dropped, 0x17, 2 * MiB)
    ctypes.memset(other, 0x33, MiB)
    s.pause("weights", stream=0)
    assert stats("weights", True)["asleepBytes"] >= 3 * MiB
    assert stats("weights", False)["asleepBytes"] >= 2 * MiB
    assert stats("weights", True)["reservedCurrent"] == 0
    assert ctypes.string_at(other, MiB) == b"\\x33" * MiB          # outside every region: untouched
    s.resume("weights", stream=0)
    assert ctypes.string_at(kept, 3 * MiB) == b"\\x42" * 3 * MiB    # same address, contents back
    assert ctypes.string_at(dropped, 2 * MiB) == bytes(2 * MiB)     # not backed up: zero, never the old bytes
    assert stats("weights", True)["asleepBytes"] == 0
    print("ok")
    """)


def test_tags_pause_alone_and_unknown_tags_name_nothing():
    run_py(PRELUDE + """
    s = ms.Saver()
    a = alloc_under(s, "a", True, MiB)
    b = alloc_under(s, "b", True, MiB)
    ctypes.memset(b, 0x5b, MiB)
    s.pause("a", stream=0)
    assert stats("a", True)["asleepBytes"] > 0 and stats("b", True)["asleepBytes"] == 0
    assert ctypes.string_at(b, MiB) == b"\\x5b" * MiB
    s.pause("a", stream=0)                     # paused already: nothing
    s.pause("never_used", stream=0)            # no allocation under it: nothing, as torch_memory_saver
    s.resume("never_used", stream=0)
    s.resume("a", stream=0)
    s.resume("a", stream=0)                    # awake already: nothing
    s.pause(None, stream=0)                    # every tag
    assert stats("a", True)["asleepBytes"] > 0 and stats("b", True)["asleepBytes"] > 0
    s.resume(None, stream=0)
    assert ctypes.string_at(b, MiB) == b"\\x5b" * MiB
    assert s.tags() == ["a", "b"]
    for bad in (3, b"a", ""):
        try:
            s.pause(bad, stream=0)
        except TypeError as e:
            assert "non-empty str" in str(e), e
        else:
            raise AssertionError(f"pause({bad!r}) was accepted")
    print("ok")
    """)


def test_host_memory_given_back_at_resume_unless_retained_and_the_backup_read_back():
    run_py(PRELUDE + """
    s = ms.Saver()
    assert s.retain_cpu_backup is False                   # TMS_RETAIN_CPU_BACKUP unset
    n = 2 * MiB + 3
    p = alloc_under(s, "kv", True, n)
    q = alloc_under(s, "scratch", False, MiB)
    ctypes.memset(p, 0x61, n)
    assert s.backup_pieces(p, n, 0) is None               # never paused
    s.pause(None, stream=0)
    pieces = s.backup_pieces(p, n, 0)
    assert sum(k for _, k in pieces) == n
    assert b"".join(ctypes.string_at(h, k) for h, k in pieces) == b"\\x61" * n
    inner = s.backup_pieces(p + 10, 5, 0)
    assert ctypes.string_at(inner[0][0], 5) == b"\\x61" * 5
    assert s.backup_pieces(q, MiB, 0) is None             # not backed up
    s.resume(None, stream=0)
    assert stats("kv", True)["sleepHostBytes"] == 0       # given back, as torch_memory_saver frees its shadows
    assert s.backup_pieces(p, n, 0) is None

    s.retain_cpu_backup = True
    s.pause("kv", stream=0)
    first = s.backup_pieces(p, n, 0)
    s.resume("kv", stream=0)
    assert stats("kv", True)["sleepHostBytes"] >= n       # retained
    ctypes.memset(p, 0x62, n)                             # the device changes; the backup is pause's
    again = s.backup_pieces(p, n, 0)
    assert again == first
    assert b"".join(ctypes.string_at(h, k) for h, k in again) == b"\\x61" * n
    s.pause("kv", stream=0)                               # the same host memory, refreshed
    assert s.backup_pieces(p, n, 0) == first
    assert b"".join(ctypes.string_at(h, k) for h, k in first) == b"\\x62" * n
    s.retain_cpu_backup = False
    s.resume("kv", stream=0)
    assert s.backup_pieces(p, n, 0) is None
    assert ctypes.string_at(p, n) == b"\\x62" * n
    print("ok")
    """)


def test_a_dropped_region_gives_back_its_memory_once_nothing_lives_under_its_tag():
    run_py(PRELUDE + """
    s = ms.Saver()
    s.retain_cpu_backup = True
    p = alloc_under(s, "t", True, MiB)
    s.pause("t", stream=0)
    s.give_back_if_empty("t", True, 0)                    # a live block: nothing
    assert stats("t", True)["asleepBytes"] > 0 and stats("t", True)["sleepHostBytes"] > 0
    tl.sova_torch_free(ctypes.c_void_p(p), MiB, 0, ctypes.c_void_p(0))   # freed while paused
    s.give_back_if_empty("t", True, 0)
    st_ = stats("t", True)
    assert st_["asleepBytes"] == 0 and st_["reservedCurrent"] == 0 and st_["sleepHostBytes"] == 0, st_
    s.give_back_if_empty("never", True, 0)                # no pool: nothing
    print("ok")
    """)


def test_region_state_follows_the_environment_and_routes_allocations():
    out = run_py(PRELUDE + """
    s = ms.Saver()
    cfg = s.config
    assert (cfg.tag, cfg.interesting_region, cfg.enable_cpu_backup, cfg.cpu_backup_backend) == \\
        ("default", True, True, "mmap"), cfg.snapshot()
    assert s.retain_cpu_backup is True
    s.use("default", True)
    cfg.apply()                                           # this thread allocates under the region now
    p = untagged(MiB)
    assert stats("default", True)["liveBlocks"] == 1
    cfg.interesting_region = False
    cfg.apply()
    untagged(MiB)
    assert stats("default", True)["liveBlocks"] == 1
    print("ok")
    """, env={"TMS_INIT_ENABLE": "1", "TMS_INIT_ENABLE_CPU_BACKUP": "1", "TMS_INIT_CPU_BACKUP_BACKEND": "mmap",
              "TMS_RETAIN_CPU_BACKUP": "1"})
    assert "ok" in out


def test_bad_environment_values_are_refused_by_name():
    for var, value in (("TMS_INIT_ENABLE", "yes"), ("TMS_RETAIN_CPU_BACKUP", "2"),
                       ("TMS_INIT_CPU_BACKUP_BACKEND", "disk")):
        out = run_py(PRELUDE + f"""
    try:
        ms.Saver()
    except ValueError as e:
        assert {var!r} in str(e), e
        print("refused")
    """, env={var: value})
        assert "refused" in out


def test_public_object_checks_arguments_before_touching_pytorch():
    run_py("""
    import sys
    from sova.memory_saver import torch_memory_saver as tms, TorchMemorySaver
    assert "torch" not in sys.modules            # importing the drop-in needs no PyTorch
    assert isinstance(tms, TorchMemorySaver) and tms.enabled
    def refused(fn, kind, words):
        try:
            fn()
        except kind as e:
            assert words in str(e), e
        else:
            raise AssertionError("accepted")
    refused(lambda: setattr(tms, "hook_mode", "cuda"), ValueError, "hook_mode must be one of")
    tms.hook_mode = "torch"
    tms.hook_mode = "preload"
    refused(lambda: tms.hook_mode, AttributeError, "can be set, not read")
    refused(lambda: tms.region(tag=3).__enter__(), TypeError, "tag must be a non-empty str")
    refused(lambda: tms.region(enable_cpu_backup=1).__enter__(), TypeError, "enable_cpu_backup must be True or False")
    refused(lambda: tms.region(cpu_backup_backend="mmap").__enter__(), ValueError, "requires enable_cpu_backup=True")
    refused(lambda: tms.region(enable_cpu_backup=True, cpu_backup_backend="disk").__enter__(), ValueError,
            "cpu_backup_backend must be one of")
    refused(lambda: tms.region(enable_disk_backup=True).__enter__(), NotImplementedError, "enable_cpu_backup=True")
    refused(lambda: tms.set_disk_backup_dir("/tmp"), NotImplementedError, "pinned host memory")
    refused(lambda: setattr(tms, "retain_cpu_backup", 1), TypeError, "retain_cpu_backup must be True or False")
    refused(lambda: setattr(tms, "memory_margin_bytes", -1), ValueError, "memory_margin_bytes")
    assert "torch" not in sys.modules
    print("ok")
    """)


def test_pythonpath_package_is_the_drop_in():
    shim = subprocess.run([sys.executable, "-m", "sova.memory_saver"], capture_output=True, text=True,
                          check=True, cwd="/").stdout.strip()
    assert os.path.isfile(os.path.join(shim, "torch_memory_saver", "__init__.py")), shim
    run_py("""
    import sova.memory_saver
    from torch_memory_saver import torch_memory_saver, configure_subprocess, TorchMemorySaver
    assert torch_memory_saver is sova.memory_saver.torch_memory_saver
    import os
    before = dict(os.environ)
    with configure_subprocess():                 # nothing to preload under sova
        assert dict(os.environ) == before
    print("ok")
    """, env={"PYTHONPATH": shim})
