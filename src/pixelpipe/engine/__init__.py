"""The engine: runs a planned Compose with threads, decoders and a device (`Engine`); the
default engines a direct Compose call uses; what a batch is before planning (sources)."""

from .defaults import close_default_engines, default_engine
from .engine import Engine
from .options import GpuDecoding
from .sources import SampleError

__all__ = ["Engine", "GpuDecoding", "SampleError", "close_default_engines", "default_engine"]
