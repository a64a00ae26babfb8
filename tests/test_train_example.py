"""examples/train.py (one process, two gloo processes under torchrun, the DataLoader baseline,
tar shards, a file list, checkpoint and resume, progress lines, bad --data) and
examples/lightning_datamodule.py, on tiny images."""

from __future__ import annotations

import importlib.util
import io
import math
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
from helpers import make_image
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
N, CLASSES = 40, 4
EPOCH_LINE = re.compile(r"^epoch (\d+)/(\d+)  loss (\S+)  accuracy (\S+)  images/s (\S+)$", re.MULTILINE)
STEP_LINE = re.compile(r"^step (\d+)  epoch (\d+)/(\d+)  loss (\S+)  images/s (\S+)$", re.MULTILINE)
STOP_LINE = re.compile(r"^stopped at step (\d+)(?:, in epoch (\d+))?  loss (\S+)  images/s (\S+)$", re.MULTILINE)


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def jpeg(i: int) -> bytes:
    h, w = 40 + (i * 7) % 50, 40 + (i * 13) % 50
    buf = io.BytesIO()
    Image.fromarray(make_image(h, w, seed=i)).save(buf, "JPEG", quality=85)
    return buf.getvalue()


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("images")
    for i in range(N):
        (root / f"class{i % CLASSES}").mkdir(exist_ok=True)
        (root / f"class{i % CLASSES}" / f"{i:03d}.jpg").write_bytes(jpeg(i))
    return str(root)


def epochs(text: str) -> list[tuple[int, float, float]]:
    """(epoch, loss, accuracy) of every epoch line."""
    return [(int(e), float(loss), float(acc)) for e, _, loss, acc, _ in EPOCH_LINE.findall(text)]


def train(capsys, *args: str) -> str:
    load("train").main(["--image-size", "32", "--batch-size", "8", "--device", "cpu", "--threads", "2", *args])
    return capsys.readouterr().out


def test_one_process(folder, capsys):
    out = train(capsys, "--data", folder, "--epochs", "2")
    assert "1 process(es) on cpu" in out and f"{CLASSES} classes" in out and "5 batches of 8" in out
    got = epochs(out)
    assert [e for e, _, _ in got] == [1, 2]
    assert all(math.isfinite(loss) and 0 <= acc <= 1 for _, loss, acc in got)


def test_resume_continues_the_same_run(folder, tmp_path, capsys):
    full = epochs(train(capsys, "--data", folder, "--epochs", "3"))
    ckpt = str(tmp_path / "ckpt.pt")
    # stop mid epoch 2 (step 7 of 5 per epoch), then at the end of epoch 2, then finish
    first = train(capsys, "--data", folder, "--epochs", "3", "--checkpoint", ckpt, "--max-steps", "7")
    assert "stopped at step 7, in epoch 2" in first
    second = train(capsys, "--data", folder, "--epochs", "3", "--checkpoint", ckpt, "--resume", ckpt,
                   "--max-steps", "10")
    third = train(capsys, "--data", folder, "--epochs", "3", "--resume", ckpt)
    assert epochs(first) + epochs(second) + epochs(third) == full


def test_max_steps_prints_loss_and_images_per_second(folder, capsys):
    out = train(capsys, "--data", folder, "--epochs", "3", "--max-steps", "7", "--log-every", "2")
    steps = [(int(s), int(e), float(loss), float(ips)) for s, e, _, loss, ips in STEP_LINE.findall(out)]
    assert [(s, e) for s, e, _, _ in steps] == [(2, 1), (4, 1), (6, 2)]  # 5 steps per epoch
    assert all(math.isfinite(loss) and ips > 0 for _, _, loss, ips in steps)
    [(step, epoch, loss, ips)] = STOP_LINE.findall(out)
    assert (step, epoch) == ("7", "2") and math.isfinite(float(loss)) and float(ips) > 0
    assert len(epochs(out)) == 1


def test_log_every_0_prints_epoch_lines_only(folder, capsys):
    out = train(capsys, "--data", folder, "--epochs", "1", "--log-every", "0")
    assert not STEP_LINE.search(out) and len(epochs(out)) == 1


def test_workers_default_fits_the_cores(capsys):
    example = load("train")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert example.parse_args([]).workers == min(4, cores)
    with pytest.raises(SystemExit):
        example.parse_args(["--help"])
    assert f"cores / processes, {min(4, cores)} here" in " ".join(capsys.readouterr().out.split())


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLES / "train.py"), "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("what", ["missing", "empty", "no images"])
def test_bad_data_is_a_one_line_usage_error(tmp_path, what):
    data = tmp_path / "data"
    if what != "missing":
        data.mkdir()
    if what == "no images":
        (data / "cat").mkdir()
        (data / "cat" / "notes.txt").write_text("not an image")
    res = run_script("--data", str(data))
    assert res.returncode == 2, res.stderr[-3000:]
    assert res.stdout == "" and "Traceback" not in res.stderr
    [line] = res.stderr.splitlines()
    assert line.startswith(f"train.py: error: --data {data}: ") and "expected" in line
    assert ("no such file or folder" if what == "missing" else "no images") in line


def test_unlabeled_folder_is_a_usage_error(tmp_path, capsys):
    for i in range(3):
        (tmp_path / f"{i}.jpg").write_bytes(jpeg(i))
    with pytest.raises(SystemExit) as info:
        train(capsys, "--data", str(tmp_path))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"train.py: error: --data {tmp_path}: ") and "no labels" in err


def test_baseline_dataloader(folder, capsys):
    out = train(capsys, "--data", folder, "--epochs", "1", "--baseline", "--workers", "0")
    assert "baseline (DataLoader + Pillow)" in out and len(epochs(out)) == 1


def test_tar_shards(tmp_path, capsys):
    for s in range(2):
        with tarfile.open(tmp_path / f"shard-{s}.tar", "w") as tar:
            for i in range(s * 12, s * 12 + 12):
                for name, data in ((f"{i:04d}.jpg", jpeg(i)), (f"{i:04d}.cls", str(i % CLASSES).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    out = train(capsys, "--data", str(tmp_path / "shard-*.tar"), "--num-classes", str(CLASSES), "--epochs", "1")
    assert "3 batches of 8" in out and len(epochs(out)) == 1


def test_file_list(folder, tmp_path, capsys):
    lines = [f"{os.path.join(folder, f'class{i % CLASSES}', f'{i:03d}.jpg')} {i % CLASSES}" for i in range(N)]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n")
    out = train(capsys, "--data", str(tmp_path / "train.txt"), "--epochs", "1")
    assert f"{CLASSES} classes" in out and "5 batches of 8" in out and len(epochs(out)) == 1


def test_torchrun_two_cpu_processes(folder):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(EXAMPLES / "train.py"), "--data", folder, "--image-size", "32", "--batch-size", "8",
           "--epochs", "2", "--device", "cpu", "--threads", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "2 process(es) on cpu" in res.stdout and "3 batches of 8 per process" in res.stdout
    assert [e for e, _, _ in epochs(res.stdout)] == [1, 2]


def test_lightning_datamodule(folder):
    try:
        import lightning as L
    except (ImportError, RuntimeError, OSError) as e:  # absent, or an install that fails on import
        pytest.skip(f"lightning cannot be imported here ({type(e).__name__}: {str(e)[:120]}); "
                    "pip install lightning")
    example = load("lightning_datamodule")
    dm = example.PixelpipeDataModule(folder, folder, batch_size=8, image_size=32, num_threads=2)
    trainer = L.Trainer(max_steps=3, limit_val_batches=2, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(example.Classifier(CLASSES), datamodule=dm)
    assert trainer.global_step == 3
    assert dm.train_pipe.state_dict()["batches"] == 3
    assert math.isfinite(float(trainer.callback_metrics["train_loss"]))
