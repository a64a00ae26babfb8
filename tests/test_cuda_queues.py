"""CUDA's hardware queues (engine/cuda_queues.py): `import pixelpipe` asks for 32 where nothing
was set and CUDA has not started; a user's value is kept; a CUDA started too early gets one
notice when a GPU decoder is made. Runs without a GPU (torch's CUDA state is a stand-in)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pixelpipe.engine import cuda_queues

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _after_import(env_value: str | None, opt_out: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in (cuda_queues.VARIABLE, cuda_queues.OPT_OUT)}
    if env_value is not None:
        env[cuda_queues.VARIABLE] = env_value
    if opt_out is not None:
        env[cuda_queues.OPT_OUT] = opt_out
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    code = f"import os, pixelpipe; print(os.environ.get({cuda_queues.VARIABLE!r}))"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_import_asks_for_32_queues_where_nothing_was_set() -> None:
    assert _after_import(None) == "32"


def test_pixelpipe_cuda_queues_0_leaves_the_variable_alone() -> None:
    assert _after_import(None, opt_out="0") == "None"
    assert _after_import(None, opt_out="1") == "32"


@pytest.mark.parametrize("value", ["1", "8"])
def test_a_users_value_is_kept(value: str) -> None:
    assert _after_import(value) == value


def test_a_cuda_started_first_is_left_alone_and_told_once(monkeypatch, capsys) -> None:
    monkeypatch.delenv(cuda_queues.VARIABLE, raising=False)
    monkeypatch.delenv(cuda_queues.OPT_OUT, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(cuda_queues, "_STATE", {"late": False, "told": False})
    assert cuda_queues.claim_queues() is False
    assert cuda_queues.VARIABLE not in os.environ
    cuda_queues.queues_notice()
    cuda_queues.queues_notice()
    err = capsys.readouterr().err
    assert err.count("CUDA started before pixelpipe was imported") == 1 and "=32" in err


def test_no_notice_when_the_queues_were_claimed_or_set(monkeypatch, capsys) -> None:
    monkeypatch.delenv(cuda_queues.VARIABLE, raising=False)
    monkeypatch.delenv(cuda_queues.OPT_OUT, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(cuda_queues, "_STATE", {"late": False, "told": False})
    assert cuda_queues.claim_queues() is True and os.environ[cuda_queues.VARIABLE] == "32"
    cuda_queues.queues_notice()
    monkeypatch.setattr(cuda_queues, "_STATE", {"late": True, "told": False})
    cuda_queues.queues_notice()  # late, but the variable is set now (by the user, say)
    assert capsys.readouterr().err == ""
