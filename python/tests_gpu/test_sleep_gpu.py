"""Sleep and wake on the GPU: data written by PyTorch survives
sleep(backup=True) and is there for a read right after wake(), on any stream;
wake(stream=s) orders the restore before later work on s; a backup that is
not a bool is a TypeError that changes nothing. The reads are on a
non-blocking side stream, which nothing but wake's own wait orders after the
restore, and the blocks are large (1 GiB) so that a restore still running
would be seen."""
from gpu_helpers import run_script

# A sova.Pool block seen by PyTorch through __cuda_array_interface__.
POOL_VIEW = """
    import torch, sova
    GiB = 1 << 30
    class View:
        def __init__(self, ptr, n):
            self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False),
                                             "version": 3, "strides": None}
    def view(ptr, n):
        return torch.as_tensor(View(ptr, n), device="cuda")
    side = torch.cuda.Stream()      # non-blocking: not ordered after the legacy stream
    def read_on_side(t):
        with torch.cuda.stream(side):   # deliberately no wait_stream: wake's own wait orders it
            total = t.to(torch.int64).sum()
            first, last = t[0].item(), t[-1].item()
        side.synchronize()
        return total.item(), first, last
"""


def test_pool_wake_returns_with_torch_written_data_in_place():
    run_script("""
""" + POOL_VIEW + """
    n = GiB
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(n)
        t = view(a, n)
        for cycle, byte in enumerate((7, 9, 11)):
            t.fill_(byte)
            torch.cuda.synchronize()
            p.sleep(backup=True)
            p.wake()                # waits for the restore
            got = read_on_side(t)
            assert got == (byte * n, byte, byte), (cycle, got)
        # Stream-ordered: read on the stream given.
        t.fill_(13)
        torch.cuda.synchronize()
        p.sleep(backup=True, stream=side.cuda_stream)
        p.wake(stream=side.cuda_stream)
        with torch.cuda.stream(side):
            total = t.to(torch.int64).sum()
        side.synchronize()
        assert total.item() == 13 * n, total.item()
        del t
        p.free(a)
    print("ok")
    """)


def test_pool_sleep_refuses_backup_none_and_keeps_the_data():
    run_script("""
""" + POOL_VIEW + """
    n = 64 << 20
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(n)
        t = view(a, n)
        t.fill_(5)
        torch.cuda.synchronize()
        for bad in (None, "yes", 2, 0):
            try:
                p.sleep(backup=bad)
            except TypeError as e:
                assert "backup must be True" in str(e), e
            else:
                raise SystemExit(f"sleep(backup={bad!r}) accepted")
            assert not p.asleep
        assert t.to(torch.int64).sum().item() == 5 * n
        p.sleep(backup=False)       # asked for: dropped
        p.wake()
        del t
        p.free(a)
    print("ok")
    """)


def test_torch_tags_wake_returns_with_the_tensors_in_place():
    run_script("""
    import torch, sova.torch as st
    st.enable()
    GiB = 1 << 30
    with st.tag("weights"):
        w = torch.empty(GiB, dtype=torch.uint8, device="cuda")
    with st.tag("kv"):
        kv = torch.empty(GiB // 4, dtype=torch.uint8, device="cuda")
    side = torch.cuda.Stream()
    for bad in (None, 2, "nope", {"weights": True}):
        try:
            st.sleep(backup=bad)
        except (TypeError, ValueError) as e:
            assert "nothing was done" in str(e) or "unknown tags" in str(e), e
        else:
            raise SystemExit(f"sova.torch.sleep(backup={bad!r}) accepted")
        assert st.tag_stats("weights")["asleepBytes"] == 0
    for cycle, byte in enumerate((3, 4, 6)):
        w.fill_(byte)
        kv.fill_(1)
        st.sleep(backup=["weights"])      # after the fills on the current stream
        assert st.tag_stats("weights")["reservedCurrent"] == 0
        st.wake()                         # waits for the restore
        with torch.cuda.stream(side):     # a stream nothing orders after the restore but wake's wait
            total = w.to(torch.int64).sum()
            last = w[-1].item()
        side.synchronize()
        assert (total.item(), last) == (byte * GiB, byte), (cycle, total.item(), last)
        assert w.cpu()[0].item() == byte
    # Stream-ordered: the restore before later work on the stream given.
    w.fill_(8)
    st.sleep(tags="weights", backup=True)
    st.wake(tags="weights", stream=side)
    with torch.cuda.stream(side):
        total = w.to(torch.int64).sum()
    side.synchronize()
    assert total.item() == 8 * GiB, total.item()
    print("ok")
    """, timeout=600)
