"""sova's torch_memory_saver drop-in (sova.memory_saver) through PyTorch on
the GPU: pause gives the device its memory back (read from the driver),
resume brings backed-up contents back at the same addresses and the rest as
zero; tags pause alone; a nested region keeps its own tag; cuda_graph's
memory pauses and the graph replays after resume; get_cpu_backup while paused
and, retained, after; disable() inside a region. torch_memory_saver's own
tests run against it in tools/device/memory-saver.sh."""
from gpu_helpers import run_script

PRELUDE = """
    import torch
    from sova.memory_saver import torch_memory_saver as tms
    GiB = 1 << 30
    def used():
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        return total - free
"""


def test_pause_and_resume_with_and_without_backup():
    run_script(PRELUDE + """
    normal = torch.full((1 << 20,), 5, dtype=torch.uint8, device="cuda")
    with tms.region(tag="weights", enable_cpu_backup=True):
        w = torch.full((GiB,), 42, dtype=torch.uint8, device="cuda")
    with tms.region(tag="weights"):
        scratch = torch.full((GiB,), 17, dtype=torch.uint8, device="cuda")
    addr = (w.data_ptr(), scratch.data_ptr())
    before = used()
    tms.pause("weights")
    assert before - used() > 1.9 * GiB, (before, used())
    assert normal[0].item() == 5
    tms.resume("weights")
    assert used() - before > -0.1 * GiB
    assert (w.data_ptr(), scratch.data_ptr()) == addr
    assert bool((w == 42).all()) and bool((scratch == 0).all())
    print("ok")
    """)


def test_tags_nesting_and_disable():
    run_script(PRELUDE + """
    with tms.region(tag="kv"):
        kv = torch.full((GiB,), 3, dtype=torch.uint8, device="cuda")
        with tms.region(tag="weights", enable_cpu_backup=True):     # nested: its own tag
            w = torch.full((GiB // 2,), 9, dtype=torch.uint8, device="cuda")
        kv2 = torch.full((GiB // 4,), 4, dtype=torch.uint8, device="cuda")   # the outer tag again
        with tms.disable():
            plain = torch.full((GiB // 4,), 8, dtype=torch.uint8, device="cuda")
            plain_sum = int(plain.sum().item())
            del plain
    before = used()
    tms.pause("kv")
    assert before - used() > 1.1 * GiB, (before, used())
    assert bool((w == 9).all())                                 # another tag: awake
    tms.pause("weights")
    tms.resume()
    assert bool((w == 9).all()) and bool((kv == 0).all()) and bool((kv2 == 0).all())
    assert plain_sum == 8 * (GiB // 4)
    try:
        with tms.disable():
            pass
    except RuntimeError as e:
        assert "inside region()" in str(e)
    else:
        raise AssertionError("disable() outside a region was accepted")
    print("ok")
    """)


def test_cuda_graph_memory_pauses_and_the_graph_replays():
    run_script(PRELUDE + """
    with tms.region(tag="kv"):
        kv = torch.full((4, 1 << 26), 1.0, device="cuda")
    x = torch.zeros(4, device="cuda")
    def fn():
        big = torch.ones(GiB // 4, device="cuda") * (x + kv.mean(dim=1)).mean()   # 1 GiB of graph memory
        return big.mean()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with tms.cuda_graph(g, tag="graph"):
        out = fn()
    x.fill_(100)
    g.replay()
    assert out.item() == 101, out.item()
    torch.cuda.empty_cache()
    before = used()
    tms.pause("graph")
    assert before - used() > 0.9 * GiB, (before, used())
    tms.pause("kv")
    tms.resume("graph")
    tms.resume("kv")
    kv.fill_(2.0)
    x.fill_(200)
    g.replay()
    assert out.item() == 202, out.item()
    print("ok")
    """)


def test_cpu_backup_read_while_paused_and_retained():
    run_script(PRELUDE + """
    assert tms.retain_cpu_backup is False
    expected = torch.arange(1 << 20, dtype=torch.int64).remainder(251).to(torch.uint8)
    with tms.region(tag="r", enable_cpu_backup=True):
        t = expected.to("cuda")
        f = torch.randn((10, 20, 30), device="cuda")
    f_cpu = f.cpu()
    assert tms.get_cpu_backup(t) is None                       # not paused
    tms.pause("r")
    got = tms.get_cpu_backup(f)
    assert got.device.type == "cpu" and got.dtype == f.dtype and got.shape == f.shape
    assert torch.equal(got, f_cpu)
    view = tms.get_cpu_backup(t, zero_copy=True)
    assert torch.equal(view, expected)
    ptr = view.data_ptr()
    del view
    tms.retain_cpu_backup = True
    tms.resume("r")
    after = tms.get_cpu_backup(t, zero_copy=True)               # retained: pause's copy
    assert after.data_ptr() == ptr and torch.equal(after, expected)
    del after
    assert torch.equal(t.cpu(), expected)
    tms.retain_cpu_backup = False
    tms.pause("r")
    tms.resume("r")
    assert tms.get_cpu_backup(t) is None                       # given back at resume
    assert torch.equal(t.cpu(), expected)
    print("ok")
    """)


def test_the_init_enable_environment_puts_the_process_in_a_region():
    run_script(PRELUDE + """
    w = torch.full((GiB,), 42, dtype=torch.uint8, device="cuda")   # no region(): TMS_INIT_ENABLE
    with tms.region(tag="grad", enable_cpu_backup=False):
        g = torch.full((GiB // 2,), 1, dtype=torch.uint8, device="cuda")
    before = used()
    tms.pause()
    assert before - used() > 1.4 * GiB, (before, used())
    tms.resume()
    assert bool((w == 42).all()) and bool((g == 0).all())
    print("ok")
    """, env={"TMS_INIT_ENABLE": "1", "TMS_INIT_ENABLE_CPU_BACKUP": "1"})
