"""How an Engine decodes JPEGs on a GPU (`GpuDecoding`): the settings it hands nvImageCodec."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GpuDecoding"]


@dataclass(frozen=True)
class GpuDecoding:
    """Settings of the GPU JPEG decoder (nvImageCodec, `pip install "pixelpipe[gpu]"`).

    Args:
        hw_fraction: the share of JPEGs for the hardware decoder (default 0.75); the rest go to
            the CUDA decoder, at the same time (None: the hardware decoder takes every JPEG it
            can). Measured in a Pipeline on an H100 (rn50, 500 ImageNet JPEGs, batch 256,
            alternating rounds): 0.75 beat None in every round, by 8-25%. The best share
            depends on the images: on two held-out sets nvImageCodec's call alone was fastest
            at 0.6, while a Pipeline's rate at 0.75, 0.9 and None stayed within its rounds'
            spread on one H200 and was best with None on another (docs/benchmarks.md, "The
            hardware share on images it was not tuned on").
        roi: let nvImageCodec decode only each sample's region (True), or decode whole images
            and let the warp read the region (False). "auto" (default): regions when a
            one-time probe in a child process decoded them cleanly on this GPU, since
            nvImageCodec 0.9.0 can crash on region decodes on H100 (NVIDIA/nvImageCodec#55).
        fancy_upsampling: decode chroma with libjpeg's triangular filter so that pixels match
            the CPU decoder's (True), or by pixel replication (False, default, as DALI does):
            about 1.7x the decoding rate for 0.14 grey levels of mean difference.
        lanes: how many nvImageCodec decoders there are. A Pipeline gives consecutive batches
            to alternate lanes and decodes them on as many threads, so that one batch decodes
            while the thread of the one before collects its results; a direct call splits its
            batch over the lanes. Default 1.
        keep_host_memory: fix glibc's malloc thresholds when the decoder is made (and when the
            Engine first runs pixel ops on the CPU), so that the process keeps its host memory
            between batches instead of mapping and unmapping it each batch
            (pixelpipe.engine.process: 14.7k -> 17.1k images/s for rn50 on an H100; 20-25 ms
            less system time per 64-image SimCLR, DeiT or RandAugment batch on 2 CPU cores).
            Process-wide; False leaves malloc as it is.
        hw_batch: how many images the hardware decoder prepares its buffers for
            (nvImageCodec's `nvjpeg_hw_decoder:preallocate_batch_size`, which DALI sets to its
            batch size), or None for nvImageCodec's default. Default 256 (a Pipeline made
            without `gpu` gives its batch size): nvImageCodec's
            decode call alone measured 5.9% faster with it at the 0.75 share on an H200
            (rn50's regions, batches of 256); a Pipeline, within its round-to-round spread
            (docs/benchmarks.md).
        ahead_fraction: "off" (default), or the hardware share (a number in [0, 1], or None:
            every JPEG the hardware decoder can take) of a second nvImageCodec decoder that
            a Pipeline uses for the batches it plans while it is ahead of its consumer (a
            batch it made is still waiting to be taken). A training step that waits for
            nothing then gets batches that cost its GPU less (the hardware JPEG engine instead
            of the CUDA decoder's kernels), and the batches planned while the consumer waits
            go to the first decoder, at `hw_fraction`. Not with `lanes` > 1; direct Engine
            calls and `pixelpipe bench`'s rates (whose consumer never waits) use the first
            decoder only. Measured beside a ResNet-18 on an H200 (docs/benchmarks.md,
            "Training beside a decoder that follows its consumer"): None gave +1% to +12%
            images/s of training (7 alternating pairs, all faster; the step's GPU time 1-3 ms
            shorter), a ResNet-50 -4% (one pair), with CUDA's 8 hardware queues; with 32
            (pixelpipe's, engine/cuda_queues.py) two pairs for each model fell both ways within
            their spread. It costs about 330 MiB more device memory (the second decoder and its
            buffers), so it stays off by default.
    """

    hw_fraction: float | None = 0.75
    roi: bool | str = "auto"
    fancy_upsampling: bool = False
    lanes: int = 1
    keep_host_memory: bool = True
    hw_batch: int | None = 256
    ahead_fraction: float | None | str = "off"

    @property
    def follows_consumer(self) -> bool:
        """Whether a Pipeline chooses each batch's decoder by how far ahead of its consumer it is."""
        return self.ahead_fraction != "off"

    @property
    def lane_fractions(self) -> list[float | None] | None:
        """The hardware share of each decoder lane where they differ ([hw_fraction,
        ahead_fraction] when following the consumer), None for `lanes` equal ones
        (GpuDecoder's lane_fractions)."""
        return [self.hw_fraction, self.ahead_fraction] if self.follows_consumer else None  # type: ignore[list-item]

    @property
    def decoders(self) -> int:
        """How many decoder lanes the Engine's GPU decoder has: 2 when following the consumer,
        else `lanes`."""
        return 2 if self.follows_consumer else self.lanes

    @property
    def options(self) -> str:
        """The nvImageCodec decoder options these settings add (GpuDecoder's `options`)."""
        return "" if self.hw_batch is None else f"nvjpeg_hw_decoder:preallocate_batch_size={self.hw_batch}"

    def __post_init__(self) -> None:
        if self.hw_fraction is not None and not 0.0 <= self.hw_fraction <= 1.0:
            raise ValueError(f"hw_fraction must be None or in [0, 1], got {self.hw_fraction}")
        if self.roi not in (True, False, "auto"):
            raise ValueError(f'roi must be True, False or "auto", got {self.roi!r}')
        if isinstance(self.lanes, bool) or not isinstance(self.lanes, int) or self.lanes < 1:
            raise ValueError(f"lanes must be an int >= 1, got {self.lanes!r}")
        if self.hw_batch is not None and (isinstance(self.hw_batch, bool) or not isinstance(self.hw_batch, int)
                                          or self.hw_batch < 1):
            raise ValueError(f"hw_batch must be None or an int >= 1, got {self.hw_batch!r}")
        a = self.ahead_fraction
        if a != "off" and a is not None and (isinstance(a, (bool, str)) or not isinstance(a, (int, float))
                                             or not 0.0 <= a <= 1.0):
            raise ValueError(f'ahead_fraction must be "off", None or in [0, 1], got {a!r}')
        if a != "off" and self.lanes > 1:
            raise ValueError(f"ahead_fraction needs lanes=1 (it adds the second decoder itself), got lanes={self.lanes}")
        object.__setattr__(self, "fancy_upsampling", bool(self.fancy_upsampling))
