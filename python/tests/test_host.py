"""What the package does on the host for each call: a training step calls it a dozen times, so anything
slow there is paid a dozen times per step, while the GPU waits for its next kernel."""

import torch

import flash_attn_steps as fas
from flash_attn_steps import _core, _lib


def _fresh_caches(monkeypatch, gpu_info):
    """steps_for as a new process sees it: `gpu_info` answering for the GPU, no kept answers, no override."""
    monkeypatch.setattr(_lib, "gpu_info", gpu_info)
    monkeypatch.setattr(_core, "_CC", {})
    monkeypatch.setattr(_core, "_DIMS", {})
    for name in ("FLASH_ATTN_STEPS_FORWARD", "FLASH_ATTN_STEPS_BACKWARD"):
        monkeypatch.delenv(name, raising=False)


def test_the_gpu_is_asked_its_compute_capability_once_per_device(monkeypatch):
    """[cc-once] steps_for picks a step from the device's compute capability on every call; the C
    library's answer is kept, so a process asks once per device, however many calls it makes."""
    asked = []

    def fake_gpu_info():
        asked.append(1)
        return 90, 132, ""

    _fresh_caches(monkeypatch, fake_gpu_info)
    calls = 5
    for _ in range(calls):
        assert fas.steps_for(torch.device("cuda", 0), 0.0, 64) == _core.HOPPER_STEPS
    assert len(asked) == 1, f"{calls} calls on one device asked the GPU {len(asked)} times"
    fas.steps_for(torch.device("cuda", 1), 0.0, 64)
    assert len(asked) == 2, "a second device must be asked for itself"


def test_the_kept_answer_is_the_one_that_picks_the_step(monkeypatch):
    """Not an answer kept from elsewhere: a device that reports sm_80 gets the Ampere steps."""
    _fresh_caches(monkeypatch, lambda: (80, 108, ""))
    assert fas.steps_for(torch.device("cuda", 0), 0.0, 64) == _core.AMPERE_STEPS


def test_a_steps_head_dimensions_are_asked_once_per_step(monkeypatch):
    """[dims-once] On sm_90 steps_for checks the head dimension against the Hopper steps' compiled ones on
    every call; the C library's answer is kept per step, so repeated calls do not ask again."""
    asked = []

    def fake_dims(step):
        asked.append(step)
        return (64, 128)

    _fresh_caches(monkeypatch, lambda: (90, 132, ""))
    monkeypatch.setattr(_lib, "step_head_dims", fake_dims)
    calls = 5
    for _ in range(calls):
        assert fas.steps_for(torch.device("cuda", 0), 0.0, 64) == _core.HOPPER_STEPS
    assert sorted(asked) == sorted(set(_core.HOPPER_STEPS)), f"{calls} calls asked {asked}"
    assert fas.steps_for(torch.device("cuda", 0), 0.0, 96) == _core.AMPERE_STEPS, "a dimension the kept answer lacks"
