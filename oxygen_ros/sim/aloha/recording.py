"""A GIF of one ALOHA episode of the closed loop: the three cameras side by side (rendered at the GIF's size,
sharper than the policy's small images), with the streamed narration, memory note and answers as captions
(``oxygen_ros.sim.media``).

The recorder hangs on the episode's physics steps: every ``every_steps`` steps it renders the cameras, and it
captions each text from the step at which the loop collected it on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from oxygen_ros.engine import ASK_TASK

from ..evaluate import EpisodeLoop, EpisodeResult
from ..media import AnswerOut, EpisodeLog, TextOut, write_gif
from .env import camera_images
from .episode import CAMERAS, AlohaEpisode
from .units import DT

NS = 1_000_000_000
CAMERA_PIXELS = 192  # each camera's width in the GIF (the policy's images upscaled)
GIF_EVERY_STEPS = 5  # a GIF frame every 0.1 s of sim time, shown at 10 fps: real time
GIF_STEPS_AFTER_SUCCESS = 50  # the filmed episode runs 1 s past the hand-over: the left arm seen holding the cube


class EpisodeRecorder:
    def __init__(self, loop: EpisodeLoop, every_steps: int = GIF_EVERY_STEPS) -> None:
        if not isinstance(loop.episode, AlohaEpisode):
            raise TypeError("the recorder records MuJoCo ALOHA episodes")
        self.loop, self.every_steps = loop, every_steps
        self.log = EpisodeLog(0, loop.spec.instruction, start_ns=0, camera_labels=CAMERAS)
        self._seen = 0  # text records already captioned
        loop.episode.on_step = self._on_step
        self._on_step(loop.episode)  # the scene at the start

    def _on_step(self, episode: AlohaEpisode) -> None:
        now = round(episode.steps * DT * NS)
        text = self.loop.text
        for i, record in enumerate(text.records[self._seen :], start=self._seen):
            if record.task == ASK_TASK:
                self.log.answers.append(AnswerOut(text.asked.get(i, ""), record.text, now, now, record.label))
            else:
                self.log.texts.append(TextOut(record.task, record.text, now, now))
        self._seen = len(text.records)
        if episode.steps % self.every_steps == 0:
            views = camera_images(episode.physics, CAMERA_PIXELS, CAMERA_PIXELS, CAMERAS).values()
            self.log.frames.append((now, np.concatenate(list(views), axis=1)))

    def write(self, result: EpisodeResult, path: Path) -> Path:
        self.log.end_ns = round(result.duration_s * NS)
        self.log.success, self.log.time_to_success_s = result.success, result.time_to_success_s
        return write_gif(self.log, path, width=CAMERA_PIXELS * len(CAMERAS))
