"""The MuJoCo ALOHA in the ROS-free closed loop: a params file's runtime and wiring, held-out episodes, and the
scripted expert as the model (the loop's oracle).

``load_params`` reads a node parameters file (``config/aloha_demo.yaml``, or a copy of
``config/robots/aloha.yaml``) as the node reads it: the runtime configuration, the control period, the state's
joints and the outputs. ``evaluate`` of `oxygen_ros.sim.evaluate` then runs the episodes exactly as for the
table-top arm (`EpisodeLoop`: a chunk every n_action_steps ticks, the text decoded between chunks, labels
from the frame each text was forked from).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from oxygen_ros.interface.settings import settings_from_values
from oxygen_ros.runtime import RuntimeConfig
from oxygen_ros.runtime.params_file import read_params_file
from oxygen_ros.runtime.paths import with_resolved_paths
from oxygen_ros.runtime.trajectory import JointLimits

from ..episode import EVAL_SEED_LIMIT
from ..evaluate import EvalSettings, deterministic_config
from .episode import EPISODE_STEPS, INSTRUCTION, AlohaEpisode, AlohaEpisodeSpec, AlohaWiring
from .units import DT

NS = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class AlohaParams:
    config: RuntimeConfig
    settings: EvalSettings
    wiring: AlohaWiring
    camera_sizes: tuple[tuple[int, int], ...]  # (width, height) per slot the file declares, 0 = any


def load_params(params_file: Path, overrides: Mapping[str, Any] | None = None) -> AlohaParams:
    """The runtime configuration, loop settings and wiring of a node parameters file with ``overrides`` (ValueError
    saying what is wrong: the node's own validation, missing checkpoint and FILL_IN placeholders included, and
    the outputs against the drivers)."""
    values, _ = read_params_file(params_file, node="oxygen_node")
    values = with_resolved_paths(values, Path(params_file).resolve().parent.parent)  # also next to the file's config/
    values.update(overrides or {})
    node, config = settings_from_values(values)
    wiring = AlohaWiring(node.joint_names, node.outputs, node.limits, node.resume_blend_s, camera_size(node.camera_sizes))
    settings = EvalSettings(control_period_s=node.control_period_s, step_period_s=node.action_step_period_s,
                            time_limit_s=EPISODE_STEPS * DT, joint_names=wiring.action_joints, limits=JointLimits())  # fmt: skip
    return AlohaParams(config, settings, wiring, node.camera_sizes)


def camera_size(sizes: tuple[tuple[int, int], ...]) -> tuple[int, int] | None:
    """The one (width, height) a file's camera slots ask for, None when they accept any; ValueError for slots
    of different sizes (one simulator renders all its cameras at one size)."""
    wanted = {s for s in sizes if s != (0, 0)}
    if len(wanted) > 1 or any(0 in s for s in wanted):
        raise ValueError(f"camera_widths/camera_heights {sorted(wanted)}: the simulated ALOHA renders its three cameras "
                         "at one size (give every slot the same width and height)")  # fmt: skip
    return wanted.pop() if wanted else None


def eval_config(config: RuntimeConfig, tokens_per_frame: int | None = None, engine_mode: str | None = None) -> RuntimeConfig:
    """A reproducible configuration: a fixed number of decode steps after each chunk. A file that says 0 ("fill
    the slack") gets the longest text task's token limit, so each frame's texts finish before the next chunk,
    as a node decoding through the 0.5 s between two chunks finishes them."""
    if tokens_per_frame is None and config.tokens_per_frame == 0 and config.tasks:
        tokens_per_frame = max(t.max_tokens for t in config.tasks)
    return deterministic_config(config, tokens_per_frame, engine_mode)


def episode_specs(wiring: AlohaWiring, seed: int, episodes: int, instruction: str = INSTRUCTION,
                  on_start: Callable[[AlohaEpisode], None] | None = None) -> list[AlohaEpisodeSpec]:  # fmt: skip
    """Held-out episodes: the cube placed by seeds seed .. seed + episodes - 1 (below the training range)."""
    if seed < 0 or episodes < 0 or seed + episodes > EVAL_SEED_LIMIT:
        raise ValueError(f"evaluation seeds must lie in [0, {EVAL_SEED_LIMIT}) (training uses the seeds above)")
    return [AlohaEpisodeSpec(s, wiring, instruction, on_start=on_start) for s in range(seed, seed + episodes)]


class RunningEpisode:
    """The episode running now (``on_start`` of the specs), as the scripted expert observes it."""

    def __init__(self) -> None:
        self.episode: AlohaEpisode | None = None

    def __call__(self, episode: AlohaEpisode) -> None:
        self.episode = episode

    def observe(self) -> Any:
        from .scripted_runtime import Observed

        e = self.episode
        if e is None:
            raise RuntimeError("no episode is running")
        return Observed(e.spec.seed, e.steps, round(e.time_s * NS), e.dataset_state())


@contextmanager
def small_checkpoint(seed: int = 0, action_scale: float = 1.0) -> Iterator[dict[str, str]]:
    """A small random ALOHA-shaped checkpoint (``checkpoint.write_small_checkpoint``, its action output scaled
    by ``action_scale``) in a temporary folder, as parameter overrides for ``load_params``."""
    from .checkpoint import write_small_checkpoint

    with tempfile.TemporaryDirectory() as work:
        checkpoint, tokenizer = write_small_checkpoint(Path(work), seed, action_scale=action_scale)
        yield {"checkpoint": str(checkpoint), "tokenizer": str(tokenizer)}


def expert_as_model(config: RuntimeConfig) -> tuple[Any, Any, RunningEpisode]:
    """The runtime of ``config`` (on a checkpoint shaped like the small one) whose action sampler returns the
    scripted expert's chunks (``scripted_runtime.ExpertAsModel``): everything after the network is the
    configuration's. Returns (runtime, expert, running): give ``running`` to the specs as ``on_start``."""
    from .scripted_runtime import ExpertAsModel

    running = RunningEpisode()
    expert = ExpertAsModel(running.observe)
    return expert.load(config), expert, running
