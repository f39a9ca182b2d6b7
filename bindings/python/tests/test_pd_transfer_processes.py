"""examples/pd_transfer.py as a test: a prefill and a decode process, each with its own SWA
pool over a buffer shared through torch.multiprocessing (CUDA IPC on a GPU, shared memory on
the CPU), requests carried between them while both compact, every element of every
transferred token checked on the decode side through its own translate. A request whose
bytes arrive wrong fails the run (the example exits 1), shown by a copy engine that drops a
copy."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))
import pd_transfer  # noqa: E402


def run(capsys, *args):
    status = pd_transfer.main(list(args))
    return status, capsys.readouterr().out


def test_requests_cross_between_two_processes_while_both_compact(device, seed, capsys):
    page_size = (1, 2, 4)[seed % 3]
    status, out = run(
        capsys,
        "--device", device,
        "--seed", str(seed),
        "--page-size", str(page_size),
        "--requests", "6",
        "--window", str(4 * page_size),
    )
    assert status == 0, out
    assert " 0 wrong, 6 published" in out
    checked = int(out.split(" elements checked")[0].rsplit(" ", 1)[1])
    assert checked > 0


def test_a_lost_copy_is_found(device, capsys):
    status, out = run(capsys, "--device", device, "--requests", "2", "--drop-run")
    assert status == 1, out
    assert " 0 wrong" not in out
