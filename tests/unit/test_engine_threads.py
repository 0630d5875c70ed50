"""CPU threads on auto: half the cores for small models, the physical cores (at most 8) once a
real-sized model loads, never lowered by a later engine of the same process; a set count or
OMP_NUM_THREADS as given."""
import pytest
import torch

from engine import EngineConfig, LocalEngine
from engine.forward import precision, threads
from engine.forward.threads import set_threads
from tests.tiny_models import tiny_pair_dirs


@pytest.fixture
def machine(monkeypatch):
    """A machine of 4 logical cores whose torch started with 4 threads; auto's choice so far and
    torch's thread count put back afterwards."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    monkeypatch.setattr(threads, "STARTUP_THREADS", 4)
    monkeypatch.setattr(threads, "_auto_threads", 0)
    before = torch.get_num_threads()
    yield monkeypatch
    torch.set_num_threads(before)


def test_auto_gives_small_models_half_the_cores_and_a_real_sized_one_all(machine):
    set_threads(0, "cpu")
    assert torch.get_num_threads() == 2
    set_threads(0, "cpu", real_sized=True)
    assert torch.get_num_threads() == 4
    set_threads(0, "auto")                   # a small model's engine after it: not lowered
    assert torch.get_num_threads() == 4
    set_threads(1, "cpu")                    # a count that is set is used as it is
    assert torch.get_num_threads() == 1


def test_auto_takes_no_more_than_the_usable_cores(machine):
    machine.setattr(threads, "usable_cores", lambda: 3)    # e.g. taskset to 3 of the 4 cores
    set_threads(0, "cpu", real_sized=True)
    assert torch.get_num_threads() == 3


def test_auto_takes_at_most_eight_threads(machine):
    machine.setattr(threads, "STARTUP_THREADS", 32)
    machine.setattr(threads, "usable_cores", lambda: 64)
    set_threads(0, "cpu", real_sized=True)
    assert torch.get_num_threads() == 8


def test_omp_num_threads_is_the_users_choice(machine):
    machine.setenv("OMP_NUM_THREADS", "3")
    torch.set_num_threads(3)
    set_threads(0, "cpu", real_sized=True)
    assert torch.get_num_threads() == 3


def test_an_engine_of_a_real_sized_target_takes_the_physical_cores(machine):
    """The tiny pair's target counted as real-sized (the limit below its size): its engine leaves
    torch the physical cores; as the small model it is, half."""
    target, _ = tiny_pair_dirs()
    LocalEngine(EngineConfig(target=target, draft="none", device="cpu"))
    assert torch.get_num_threads() == 2
    machine.setattr(precision, "SMALL_MODEL_BYTES", 1024)
    engine = LocalEngine(EngineConfig(target=target, draft="none", device="cpu"))
    assert precision.real_sized(engine.target.parameters) and torch.get_num_threads() == 4
