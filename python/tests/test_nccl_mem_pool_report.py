"""bench/torch/nccl_mem_pool.py's verdict, without GPUs: a backend passes only
when every mode ran with exact sums on every rank and NCCL logged a
registration of sova's pool on every rank; reg_lines counts the lines of a
rank's NCCL log that name a registration."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "torch"))
import nccl_mem_pool as nmp  # noqa: E402  (imports no torch until main() or a worker runs)


def rank(r, *, exact=True, sova_regs=5, error_in=None):
    sizes = [{"mib": 1, "exact": True, "us": 40.0, "busbw_gbs": 50.0},
             {"mib": 4, "exact": exact, "us": 45.0, "busbw_gbs": 140.0}]
    modes = {}
    for mode in nmp.MODES:
        modes[mode] = {"sizes": sizes, "segments": 5,
                       "reg_log_lines": sova_regs if mode == "sova_pool_reg" else (5 if "reg" in mode else 0)}
    if error_in:
        modes[error_in] = {"error": "RuntimeError: refused"}
    return {"rank": r, "world": 2, "modes": modes}


def test_every_mode_exact_and_registered_passes(capsys):
    assert nmp.report("pytorch", [rank(0), rank(1)])
    assert "WRONG SUM" not in capsys.readouterr().out


def test_a_wrong_sum_on_one_rank_fails(capsys):
    assert not nmp.report("pytorch", [rank(0), rank(1, exact=False)])
    assert "WRONG SUM" in capsys.readouterr().out


def test_no_registration_logged_on_one_rank_fails(capsys):
    assert not nmp.report("native", [rank(0), rank(1, sova_regs=0)])
    assert "NOT REGISTERED" in capsys.readouterr().out


def test_a_mode_that_raised_fails(capsys):
    assert not nmp.report("pytorch", [rank(0, error_in="nccl_pool_reg"), rank(1)])
    assert "ERROR RuntimeError: refused" in capsys.readouterr().out


def test_reg_lines_counts_registration_lines_of_the_rank(tmp_path):
    (tmp_path / "nccl-native.host.42.log").write_text(
        "host:42:42 [0] NCCL INFO register comm 0x1 buffer 0x2 size 2097152\n"
        "host:42:42 [0] NCCL INFO other line\n"
        "host:42:42 [0] NCCL INFO register comm 0x1 buffer 0x3 size 20971520\n")
    (tmp_path / "nccl-native.host.43.log").write_text("host:43:43 [1] NCCL INFO register comm 0x9\n")
    lines = nmp.reg_lines(str(tmp_path / "nccl-native.*.42.log"))
    assert len(lines) == 2 and all("register comm" in line for line in lines)
