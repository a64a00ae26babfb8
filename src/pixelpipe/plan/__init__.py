"""The planner: a list of ops folded into stages (`build` -> `Program`), and per batch into
per-sample numbers (`Stage.sample` -> `StagePlan`); `fast` is the one door to the C planner."""

from .output import Form, Output
from .stage_plan import StagePlan
from .stages import Program, Stage, build

__all__ = ["Form", "Output", "Program", "Stage", "StagePlan", "build"]
