"""Shared fixtures: the devices the loaded kvpool library serves, and the seeds of
the randomised tests (``--kvpool-seeds K`` runs seeds 1..K, ``--kvpool-seed N`` one).

A test that takes ``device`` runs once per device: "cpu" always (a GPU build
serves CPU tensors too), "cuda" when the library serves it and torch sees a GPU."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def pytest_addoption(parser):
    parser.addoption("--kvpool-seeds", type=int, default=10, help="seeds 1..K for randomised tests")
    parser.addoption(
        "--kvpool-seed", type=int, default=None, help="run the randomised tests with this seed only"
    )


def pytest_generate_tests(metafunc):
    if "seed" in metafunc.fixturenames:
        one = metafunc.config.getoption("--kvpool-seed")
        seeds = (
            [one]
            if one is not None
            else list(range(1, metafunc.config.getoption("--kvpool-seeds") + 1))
        )
        metafunc.parametrize("seed", seeds, ids=[f"seed{s}" for s in seeds])


def served_devices():
    import kvpool
    import torch

    return [d for d in kvpool.devices() if d == "cpu" or torch.cuda.is_available()]


@pytest.fixture(scope="session", params=served_devices())
def device(request):
    return request.param


@pytest.fixture(autouse=True)
def print_seed(request):
    seed = request.node.callspec.params.get("seed") if hasattr(request.node, "callspec") else None
    if seed is not None:
        print(f"kvpool test seed {seed} (rerun alone with --kvpool-seed {seed})")
