"""VideoPipeline: video reader -> epoch order -> clip sampling + decoding on threads -> the same
augmentation on every frame of a clip -> batches of clips.

Why a class of its own and not pixelpipe.Pipeline: a Pipeline's sample is one encoded image
that its Engine plans from headers and decodes region by region; a video's sample is a set of
clips decoded whole by a video decoder. What is shared is shared by import: the epoch order
(shuffling, sharding, padding: loader.sampler.indexable_epoch), the error log, the shard and
argument checks, and the Compose that augments the frames (data.clips.augment_clips).

The order of the work is simple on purpose: videos are decoded on a thread pool up to
`prefetch` batches ahead, in the epoch's order and on into the next epoch's first videos (an
epoch of a few batches would otherwise drain and refill the decoders at every start: 32
videos in batches of 8 on an H200, 72 against 85 clips/s with the epoch 8 times as long); the
consumer takes them in that order, applies the on_error policy, and augments each batch as it
hands it out. A batch depends only on (seed, epoch, rank, cursor), so `state_dict` is the
epoch, the cursor and the errors, and a resumed run gives exactly the batches the first run
would have given. Each file is probed once (decode.video_index) while it stays unchanged.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..compose import Compose
from ..data.clips import LAYOUTS, Clip, ClipSampler, clip_ids
from ..data.threads import default_threads
from ..data.transfer import Upload, to_device
from ..decode.video_gpu import NvdecVideoDecoder, VideoDecodeStats
from ..decode.video_index import VideoIndex
from ..engine import Engine
from ..engine.clips import augment_clips
from ..ops.kinds import Op
from .arguments import flag, whole
from .collate import shard_of
from .errors import ErrorLog, Reported
from .sampler import EpochOrder, batches_per_epoch, indexable_epoch

__all__ = ["VideoPipeline"]

POLICIES = ("raise", "skip")
_OURS = (ImportError, TypeError, AttributeError, NameError, AssertionError)


@dataclass
class _Video:
    """One video's clips, decoded: [T, H, W, 3] uint8 each (CPU or the device)."""

    index: int
    clips: list[Clip]
    frames: list[torch.Tensor]


class VideoPipeline(Reported):
    """An iterator of batches of clips for video training.

    Args:
        reader: an indexable reader of videos: a VideoFolder, a VideoFileList, or any indexable
            reader whose samples are encoded video files (bytes).
        transforms: a Compose with layout "NCHW" (or a list of ops), applied to every frame of
            a clip with the clip's draws (see pixelpipe.data.clips).
        batch_size: videos per batch; a batch holds batch_size * clips_per_video clips.
        clips: a ClipSampler: frames per clip, stride, clips per video, start, fps, pad_last.
        layout: the clips' layout: "NTCHW" (default), "NCTHW" or "NTHWC".
        device: "cpu", "cuda" or "cuda:N": where the clips are augmented and returned.
        gpu_decode: on CUDA, decode on NVDEC through PyNvVideoCodec (default True there), each
            file falling back to the CPU decoder with the reason counted in `decode_stats`.
        seed: fixes shuffling, clip starts and every augmentation.
        shuffle: a fresh order of the videos every epoch.
        drop_last: drop the videos that do not fill a batch on every rank; otherwise the last
            batch is filled with readable videos of the rank's epoch again, marked False in
            "valid".
        num_threads: threads decoding videos (one file per thread; default: the cores,
            shared between torchrun's ranks on this host).
        prefetch: batches decoded ahead of the consumer.
        shard: (rank, world_size); default from torch.distributed when it is initialised. Every
            rank gets the same number of batches.
        on_error: "raise" (an error naming the video and why) or "skip" (it is left out, listed
            in `errors`, and the batch is filled from the next videos).

    Each batch is a dict, one row per clip (the clips of a video are consecutive rows):
    "video" (the transforms' dtype, in `layout`), "label" (int64 [N], -1 without labels),
    "index" (int64 [N], the video's index in the reader), "clip" (int64 [N], the clip's number
    in its video), "start" (int64 [N], its first frame), "frames" (int64 [N, T], the frame
    indices), "timestamps" (float64 [N, T], seconds), "fps" (float64 [N], the video's frame
    rate) and "valid" (bool [N]); with MixUp/CutMix in the transforms, "label" holds their
    soft targets.

    `len(pipe)` is the batches per epoch; each `iter(pipe)` starts the next epoch, except right
    after `load_state_dict`, which continues the saved one. Errors: `errors` lists each video
    that failed once as (index, source, reason); `epoch_errors` those of the current epoch.
    Nothing is lost silently: every video the epoch deals this rank is in a batch or in
    `epoch_errors`. Zero-length, truncated, corrupt and audio-only files, and with
    pad_last=False videos shorter than a clip, are such errors.

    Example:
        >>> pipe = VideoPipeline(VideoFolder("/data/videos"), [pp.RandomResizedCrop(112)],  # doctest: +SKIP
        ...                      batch_size=8, clips=ClipSampler(16, stride=2))
        >>> next(iter(pipe))["video"].shape                                                  # doctest: +SKIP
        torch.Size([8, 16, 3, 112, 112])
    """

    def __init__(self, reader: Any, transforms: Compose | list[Op], batch_size: int,
                 clips: ClipSampler | None = None, layout: str = "NTCHW", device: str = "cpu",
                 gpu_decode: bool | None = None, seed: int = 0, shuffle: bool = True, drop_last: bool = False,
                 num_threads: int | None = None, prefetch: int = 2, shard: tuple[int, int] | None = None,
                 on_error: str = "raise") -> None:
        self.batch_size = whole("batch_size", batch_size, 1)
        self.seed = whole("seed", seed, 0)
        self.shuffle, self.drop_last = flag("shuffle", shuffle), flag("drop_last", drop_last)
        self.prefetch = whole("prefetch", prefetch, 1)
        if on_error not in POLICIES:
            raise ValueError(f"on_error must be one of {POLICIES}, got {on_error!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
        if not getattr(reader, "indexable", False):
            raise TypeError(f"VideoPipeline needs an indexable reader of videos (VideoFolder, VideoFileList), "
                            f"got {type(reader).__name__}")
        self.reader, self.on_error, self.layout = reader, on_error, layout
        self.clips = clips if clips is not None else ClipSampler()
        if not isinstance(self.clips, ClipSampler):
            raise TypeError(f"clips must be a ClipSampler, got {type(self.clips).__name__}")
        self.transforms = transforms if isinstance(transforms, Compose) else Compose(list(transforms))
        if self.transforms.layout != "NCHW":
            raise ValueError("the transforms' Compose must have layout 'NCHW' (the frames'); choose the clips' "
                             f"layout with layout= (got a Compose with {self.transforms.layout!r})")
        self.rank, self.world = shard_of(shard)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
        self.num_threads = num_threads if num_threads is not None else default_threads()
        self.engine = Engine(self.device, self.num_threads)
        self.decode_stats = VideoDecodeStats()
        use_gpu = self.device.type == "cuda" if gpu_decode is None else flag("gpu_decode", gpu_decode)
        if use_gpu and self.device.type != "cuda":
            raise ValueError("gpu_decode=True needs device='cuda'")
        self._nvdec = NvdecVideoDecoder(self.device, self.decode_stats) if use_gpu else None
        self._index = VideoIndex()  # each file probed once while it is unchanged (decode.video_index)
        n = len(reader)
        if n == 0:
            raise ValueError("the dataset is empty")
        if self.drop_last and len(self) == 0:
            raise ValueError(f"drop_last=True leaves no batch: the {n} videos give each of the {self.world} rank(s) "
                             f"{n // self.world}, fewer than batch_size={self.batch_size}")
        self._labels = reader.labels
        self._log = ErrorLog()
        self._pool: ThreadPoolExecutor | None = None
        self.epoch = -1
        self._cursor = 0  # slots of the epoch's order behind the batches handed out
        self._made = 0
        self._done = False
        self._resume = False
        self._ahead: tuple[int, deque[tuple[int, bool, Future]]] | None = None  # (epoch, its first videos)

    # ----------------------------------------------------------------------------- sizes
    def __len__(self) -> int:
        return batches_per_epoch(len(self.reader), self.world, self.batch_size, self.drop_last)

    # ----------------------------------------------------------------------------- decoding
    def _source(self, i: int) -> Any:
        """A file reader's path (decoded in place), or the sample's encoded bytes."""
        if getattr(self.reader, "reads_files", False):
            return self.reader.sources(i)
        return self.reader.read(i).data

    def _load(self, i: int, epoch: int) -> _Video | tuple[int, str, str]:
        """Video i's clips for `epoch`, decoded; or (index, source, reason) when it fails."""
        source = "?"
        try:
            source = self.reader.sources(i)
            data = self._source(i)

            chosen: list[Clip] = []

            def pick(info: Any) -> list[np.ndarray]:  # the clips, from the probe of the opened file
                chosen[:] = self.clips.sample(info, self.seed, epoch, i)
                return [c.frames for c in chosen]

            info = self._index.probe(data) if isinstance(data, (str, os.PathLike)) else None
            if self._nvdec is not None:
                _, frames = self._nvdec.decode(data, pick, threads=1, info=info)
            else:
                from ..decode.video import decode_sampled

                _, arrays = decode_sampled(data, pick, info, threads=1)
                frames = [torch.from_numpy(a) for a in arrays]
                self.decode_stats.add("cpu")
            return _Video(i, list(chosen), frames)
        except Exception as e:  # the file's fault (FFmpeg's errors, OSError, VideoError, too short) ...
            if isinstance(e, _OURS):  # ... but not a missing module or a programming error
                raise
            return (i, str(source), f"{type(e).__name__}: {e}")

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.num_threads, thread_name_prefix="pixelpipe-video")
        return self._pool

    # ----------------------------------------------------------------------------- iteration
    def _order(self, epoch: int) -> EpochOrder:
        return indexable_epoch(len(self.reader), self.seed, epoch, self.shuffle, self.rank, self.world,
                               self.batch_size, self.drop_last)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if not self._resume:
            self.epoch += 1
            self._cursor, self._made = 0, 0
            self._log.new_epoch()
        self._resume, self._done = False, False
        return self._batches(self.epoch, self._cursor, self._made)

    def _batches(self, epoch: int, cursor: int, made: int) -> Iterator[dict[str, Any]]:
        """The batches of `epoch` from slot `cursor` on. Videos are submitted to the decoding
        threads in order up to `prefetch + 1` batches ahead, across the epoch's end too: the
        next epoch's first videos are decoding while this epoch's last batches are handed out,
        and its iterator takes them (kept in `_ahead` only when this epoch ran to its end)."""
        order, total = self._order(epoch), len(self)
        pool, ahead = self._executor(), (self.prefetch + 1) * self.batch_size
        queue, nxt = self._take_ahead(epoch, cursor)  # (slot, valid, future) of this epoch, the next slot
        later: deque[tuple[int, bool, Future]] = deque()  # the next epoch's first videos
        following: list[EpochOrder] = []  # the next epoch's order, made when first needed

        def fill() -> None:
            nonlocal nxt
            while len(queue) + len(later) < ahead:
                if nxt < len(order):
                    i, valid = order[nxt]
                    queue.append((nxt, valid, pool.submit(self._load, i, epoch)))
                    nxt += 1
                    continue
                if not following:
                    following.append(self._order(epoch + 1))
                k = len(later)
                if k >= len(following[0]):
                    return
                i, valid = following[0][k]
                later.append((k, valid, pool.submit(self._load, i, epoch + 1)))

        finished = False
        try:
            while made < total:
                rows: list[tuple[_Video, bool]] = []
                while len(rows) < self.batch_size:
                    fill()
                    if not queue:
                        break
                    slot, valid, fut = queue.popleft()
                    got = fut.result()
                    cursor = slot + 1
                    if isinstance(got, tuple):
                        self._failed(got)
                        continue
                    rows.append((got, valid))
                if len(rows) < self.batch_size:  # the order ran out (failures were skipped): pad
                    if self.drop_last and rows:
                        break
                    rows += [(v, False) for v in self._padding(order, epoch, self.batch_size - len(rows))]
                batch = self._batch(rows, epoch)
                made += 1
                self._cursor, self._made = cursor, made
                yield batch
            self._done = finished = True
        finally:
            _cancel(queue)
            if finished:
                self._ahead = (epoch + 1, later)
            else:
                _cancel(later)

    def _take_ahead(self, epoch: int, cursor: int) -> tuple[deque[tuple[int, bool, Future]], int]:
        """The videos submitted ahead for `epoch` when its run starts at its beginning, and the
        slot after them; otherwise nothing (what was submitted ahead is cancelled)."""
        kept = self._ahead
        if kept is not None and kept[0] == epoch and cursor == 0:
            self._ahead = None
            return kept[1], len(kept[1])
        self._discard_ahead()
        return deque(), cursor

    def _discard_ahead(self) -> None:
        kept, self._ahead = self._ahead, None
        if kept is not None:
            _cancel(kept[1])

    def _failed(self, error: tuple[int, str, str]) -> None:
        self._log.add([error])
        if self.on_error == "raise":
            from ..decode.video import VideoError

            index, source, reason = error
            raise VideoError(f"video {index} ({source}): {reason} (on_error='skip' leaves failing videos out)")

    def _padding(self, order: EpochOrder, epoch: int, count: int) -> list[_Video]:
        """`count` readable videos from the start of this rank's epoch, to fill a batch (the
        same whatever was resumed where)."""
        out: list[_Video] = []
        for k in range(len(order)):
            if len(out) == count:
                break
            got = self._load(order[k].index, epoch)
            if not isinstance(got, tuple):
                out.append(got)
        if not out:
            raise RuntimeError(f"no video of epoch {epoch} on rank {self.rank} could be read: see pipe.errors")
        return (out * -(-count // len(out)))[:count]

    def _batch(self, rows: list[tuple[_Video, bool]], epoch: int) -> dict[str, Any]:
        """Augment the clips of `rows` (videos) and collect their metadata, one row per clip:
        made on the host and sent in one copy (data.transfer.Upload; pinned, asynchronous on
        CUDA: a copy per field took a pinned block each, and waited 20-30 ms now and then for one
        on an H200)."""
        dev = self.device
        clips = [c for v, _ in rows for c in v.clips]
        frames = [to_device(f, dev) for v, _ in rows for f in v.frames]
        videos = np.array([c.video for c in clips], dtype=np.int64)
        numbers = np.array([c.clip for c in clips], dtype=np.int64)
        picked = np.stack([c.frames for c in clips])
        labels = (self._labels[torch.from_numpy(videos)] if self._labels is not None
                  else torch.full((len(clips),), -1, dtype=torch.int64)).numpy()
        fields = {"valid": (np.repeat([ok for _, ok in rows], [len(v.clips) for v, _ in rows]), torch.bool),
                  "label": (labels, torch.int64), "index": (videos, torch.int64), "clip": (numbers, torch.int64),
                  "start": (picked[:, 0], torch.int64), "frames": (picked, torch.int64),
                  "timestamps": (np.stack([c.timestamps for c in clips]), torch.float64),
                  "fps": (np.array([c.fps for c in clips], dtype=np.float64), torch.float64)}
        up = Upload()
        for values, dtype in fields.values():
            up.add(values, dtype)
        meta = dict(zip(fields, up.send(dev)))
        ids = clip_ids(videos, numbers, self.clips.clips_per_video)
        values = {"label": meta["label"], "valid": meta["valid"]} if self.transforms.program.batch_ops else {}
        out = augment_clips(self.transforms, frames, ids, self.seed, epoch, self.layout, engine=self.engine, **values)
        batch: dict[str, Any] = out if isinstance(out, dict) else {"video": out}
        label = meta.pop("label")
        batch.setdefault("label", label)  # batch ops (MixUp, CutMix) give soft labels of their own
        batch.update(meta)
        return batch

    # ----------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """The epoch and position of what the consumer received, and the errors it was told of;
        load_state_dict continues with exactly the same remaining batches."""
        return {"epoch": self.epoch, "cursor": self._cursor, "batches": self._made, "finished": self._done,
                "seed": self.seed, "batch_size": self.batch_size, "shard": (self.rank, self.world),
                "clips": repr(self.clips), **self._log.state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a state_dict(); a ValueError for one saved with other settings."""
        mine = self.state_dict()
        for key in ("epoch", "cursor", "batches", "seed", "batch_size", "shard", "clips"):
            if key not in state:
                raise ValueError(f"state has no {key!r}: not a VideoPipeline state")
        for key in ("seed", "batch_size", "shard", "clips"):
            saved = tuple(state[key]) if key == "shard" else state[key]
            if saved != mine[key]:
                raise ValueError(f"state saved with {key}={state[key]!r}, this pipeline has {mine[key]!r}")
        epoch, cursor, made = int(state["epoch"]), int(state["cursor"]), int(state["batches"])
        if epoch >= 0 and not (0 <= made <= len(self) and 0 <= cursor <= len(self._order(epoch))):
            raise ValueError(f"state position (cursor {cursor}, batches {made}) is outside epoch {epoch}")
        self._log.load(state)
        self._discard_ahead()
        self.epoch, self._cursor, self._made = epoch, cursor, made
        finished = bool(state.get("finished")) or made >= len(self)
        self._resume = epoch >= 0 and not finished

    # ----------------------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Stop the decoding threads and the engine's."""
        self._discard_ahead()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self.engine.close()

    def __repr__(self) -> str:
        return (f"VideoPipeline({self.reader!r}, batch_size={self.batch_size}, {self.clips!r}, "
                f"layout={self.layout!r}, device={str(self.device)!r})")


def _cancel(submitted: deque[tuple[int, bool, Future]]) -> None:
    """Cancel the videos submitted and not started (those running finish and are dropped)."""
    for _, _, fut in submitted:
        fut.cancel()
