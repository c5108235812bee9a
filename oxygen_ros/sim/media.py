"""What the demo leaves behind: an animated GIF of one episode with the streamed text as captions, and a
PNG summary of every episode (true subtask vs narration over time, joint motion, outcome). No ROS here:
the demo's listener collects an `EpisodeLog` per episode from the topics and hands it over.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from .expert import SUBTASKS

NS = 1_000_000_000


@dataclass
class TextOut:
    task: str
    text: str
    source_ns: int  # the observation the request was forked from
    final_ns: int  # when its last delta was produced


@dataclass
class AnswerOut:
    question: str
    answer: str
    source_ns: int  # the frame the answer was forked from (0: none)
    final_ns: int  # when the result arrived
    truth: str | None  # the simulator's answer at that frame (None: unknown)

    @property
    def mark(self) -> str:
        return "" if self.truth is None else ("✓" if self.answer.strip().lower() == self.truth.lower() else "✗")

    @property
    def verdict(self) -> str:
        """The mark in words (the GIF's font has no ✓/✗), with the truth when wrong: "correct", never "right",
        which answers about places use as a direction ("back right")."""
        return {"": "", "✓": "[correct]", "✗": f"[wrong; true: {self.truth}]"}[self.mark]

    def caption(self) -> str:
        """One line for a picture: the question, the answer in quotes, the verdict set apart from it."""
        return f'Q: {self.question}   A: "{self.answer.strip()}"   {self.verdict}'.rstrip()


@dataclass
class EpisodeLog:
    index: int
    instruction: str
    start_ns: int
    end_ns: int = 0
    success: bool = False
    time_to_success_s: float | None = None
    labels: list[tuple[int, str | None, str | None]] = field(default_factory=list)  # (stamp, subtask, memory)
    texts: list[TextOut] = field(default_factory=list)
    frames: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (stamp, large base view)
    wrist: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (stamp, wrist view)
    joints: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (stamp, positions)
    truths: list[tuple[int, dict[str, str]]] = field(default_factory=list)  # (stamp, question -> true answer)
    answers: list[AnswerOut] = field(default_factory=list)
    camera_labels: tuple[str, ...] = ()  # the views side by side in ``frames``, left to right (drawn on them)

    def truth_at(self, stamp_ns: int, question: str) -> str | None:
        """The simulator's answer to ``question`` at a time (the last truths published at or before it)."""
        i = bisect.bisect_right([s for s, _ in self.truths], stamp_ns) - 1
        return self.truths[i][1].get(question) if i >= 0 else None

    def label_at(self, stamp_ns: int) -> tuple[str | None, str | None]:
        """The true (subtask, memory) at a time: the last label published at or before it."""
        i = bisect.bisect_right([s for s, _, _ in self.labels], stamp_ns) - 1
        return (self.labels[i][1], self.labels[i][2]) if i >= 0 else (None, None)

    def judged(self, task: str) -> list[tuple[TextOut, bool]]:
        """Each finished output of ``task`` with whether it matches the truth at its observation."""
        column = 0 if task == "language" else 1
        out = []
        for t in self.texts:
            if t.task != task:
                continue
            label = self.label_at(t.source_ns)[column]
            if label is not None:
                out.append((t, t.text.strip().lower() == label.lower()))
        return out


def _font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType sizes
        return ImageFont.load_default()


def _latest(items: list[tuple[int, np.ndarray]], stamp_ns: int) -> np.ndarray | None:
    i = bisect.bisect_right([s for s, _ in items], stamp_ns) - 1
    return items[i][1] if i >= 0 else None


def _said_by(log: EpisodeLog, task: str, stamp_ns: int) -> str:
    latest = _latest_text(log, task, stamp_ns)
    return latest.text.strip() if latest else "…"


def _latest_text(log: EpisodeLog, task: str, stamp_ns: int) -> TextOut | None:
    done = [t for t in log.texts if t.task == task and t.final_ns <= stamp_ns]
    return done[-1] if done else None


def _memory_caption(log: EpisodeLog, stamp_ns: int) -> str:
    """The latest memory note with the age of the frame it describes (notes come every few frames)."""
    note = _latest_text(log, "memory", stamp_ns)
    if note is None:
        return "memory: …"
    return f"memory (of the scene {max(0.0, (stamp_ns - note.source_ns) / NS):.1f} s ago): {note.text.strip()}"


def _label_views(d: ImageDraw.ImageDraw, labels: tuple[str, ...], width: int, font: ImageFont.ImageFont) -> None:
    """Each view's name in its top-left corner (views of equal width side by side)."""
    each = width / max(1, len(labels))
    for i, label in enumerate(labels):
        x = round(i * each) + 4
        d.rectangle([x - 2, 2, x + 7 * len(label) + 4, 18], fill=(0, 0, 0))
        d.text((x, 3), label, fill=(240, 240, 240), font=font)


def episode_frames(log: EpisodeLog, width: int = 320) -> list[Image.Image]:
    """One picture per recorded camera frame: base view, wrist view beside it, the streamed text below. A log
    without wrist views shows its frames alone, ``width`` wide at their own aspect (e.g. cameras side by side)."""
    font, small = _font(15), _font(13)
    side = width // 2 if log.wrist else 0
    answer_lines = max(1, len(log.answers))  # every answer keeps its line once given
    out = []
    for stamp, view in log.frames:
        if stamp < log.start_ns - NS:  # from before the policy was there (the first scene waits for it)
            continue
        height = width if log.wrist else round(width * view.shape[0] / view.shape[1])
        canvas = Image.new("RGB", (width + side, height + 84 + 22 * answer_lines), (24, 26, 30))
        canvas.paste(Image.fromarray(view).resize((width, height), Image.Resampling.BILINEAR), (0, 0))
        wrist = _latest(log.wrist, stamp)
        d = ImageDraw.Draw(canvas)
        _label_views(d, log.camera_labels, width, small)
        if wrist is not None:
            canvas.paste(Image.fromarray(wrist).resize((side, side), Image.Resampling.NEAREST), (width, 0))
        if log.wrist:
            d.text((width + 8, side + 6), "base camera (left)", fill=(170, 170, 170), font=small)
            d.text((width + 8, side + 24), "wrist camera (above)", fill=(170, 170, 170), font=small)
        t = (stamp - log.start_ns) / NS
        d.text((8, height + 4), f"task: {log.instruction}   t = {max(t, 0):4.1f} s", fill=(235, 235, 235), font=font)
        d.text((8, height + 26), f"narration: {_said_by(log, 'language', stamp)}", fill=(120, 220, 140), font=font)
        d.text((8, height + 48), _memory_caption(log, stamp), fill=(140, 180, 250), font=small)
        answered = [a for a in log.answers if a.final_ns <= stamp]  # only once the policy answered
        for i, a in enumerate(answered):
            d.text((8, height + 70 + 22 * i), a.caption(), fill=(240, 200, 120), font=small)
        out.append(canvas)
    if out:  # hold the outcome on the last frame
        last = out[-1].copy()
        d = ImageDraw.Draw(last)
        verdict = f"SUCCESS in {log.time_to_success_s:.1f} s" if log.success else "FAILED"
        d.rectangle([0, 0, width, 30], fill=(30, 120, 60) if log.success else (150, 40, 40))
        d.text((8, 6), verdict, fill=(255, 255, 255), font=font)
        out += [last] * 10
    return out


def write_gif(log: EpisodeLog, path: Path, fps: float = 10.0, width: int = 320) -> Path:
    frames = episode_frames(log, width)
    if not frames:
        raise ValueError("no camera frames were recorded for this episode")
    path.parent.mkdir(parents=True, exist_ok=True)
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=int(1000 / fps), loop=0, optimize=True)
    return path


def gif_frame_count(path: Path) -> int:
    """Frames the GIF file holds (Pillow merges identical consecutive frames into one longer frame)."""
    with Image.open(path) as gif:
        return int(getattr(gif, "n_frames", 1))


def subtask_spans(log: EpisodeLog) -> list[tuple[float, float, str]]:
    """The true subtask over the episode as (from, to, kind) in seconds of episode time, from a second before
    its start to its end. The label in force at that first moment may be older (labels are sent when they
    change, and an episode's start is restated once the policy is up): it counts from there."""
    first = log.start_ns - NS
    earlier = [(first, lab) for s, lab, _ in log.labels if s < first][-1:]
    changes = earlier + [(s, lab) for s, lab, _ in log.labels if s >= first]
    spans = []
    for i, (s, lab) in enumerate(changes):
        end = changes[i + 1][0] if i + 1 < len(changes) else log.end_ns
        if lab and end > s:
            spans.append(((s - log.start_ns) / NS, (end - log.start_ns) / NS, lab.split()[0]))
    return spans


TABLE_TOP_JOINTS = ((0, "yaw"), (1, "shoulder"), (2, "elbow"))  # (index in the joint state, label)
PHASE_COLOURS = ("#8fb3de", "#f2c36b", "#87c98f", "#d9a0d0")


def write_summary(logs: list[EpisodeLog], path: Path, subtasks: tuple[str, ...] = SUBTASKS,
                  joints: tuple[tuple[int, str], ...] = TABLE_TOP_JOINTS) -> Path:  # fmt: skip
    """Per episode: the true subtask as coloured spans (``subtasks``, told apart by their first word), each
    narration as a dot at its observation time (filled = it named the true subtask), the outcome; below, the
    ``joints`` over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [s.split()[0] for s in subtasks]
    colours = dict(zip(kinds, PHASE_COLOURS))
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(10, 2.0 + 1.1 * len(logs)), gridspec_kw={"height_ratios": [len(logs) + 1, 3]})
    for row, log in enumerate(logs):
        y = len(logs) - row
        for left_s, right_s, kind in subtask_spans(log):
            if kind in colours:
                ax.barh(y, right_s - left_s, left=left_s, height=0.5, color=colours[kind], edgecolor="none")
        for out, ok in log.judged("language"):
            kind = out.text.strip().split()[0] if out.text.strip() else ""
            x = (out.source_ns - log.start_ns) / NS
            ax.plot(x, y + 0.35, "o", ms=4, color=colours.get(kind, "#888888"), mec="k", mew=0.5, alpha=1.0 if ok else 0.35)
        verdict = f"success {log.time_to_success_s:.1f} s" if log.success else "failed"
        ax.text(-0.2, y, f"{log.instruction}\n{verdict}", ha="right", va="center", fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in kinds]
    ax.legend(handles, [f"true: {k}" for k in kinds], loc="upper right", fontsize=7, ncol=len(kinds))
    ax.set_yticks([])
    ax.set_xlabel("episode time (s); dots: narration at its observation, coloured by the subtask it names (faded = wrong)")
    ax.set_xlim(left=-0.1)
    for log in logs:
        states = [(s, p) for s, p in log.joints if s >= log.start_ns - NS]
        if states:
            t = np.array([(s - log.start_ns) / NS for s, _ in states])
            q = np.stack([p for _, p in states])
            for n, (j, name) in enumerate(joints):
                bx.plot(t, q[:, j], lw=1, color=f"C{n}", label=name if log is logs[0] else None)
    bx.set_xlabel("episode time (s)")
    bx.set_ylabel("joint (rad)")
    bx.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_frames_gif(frames: list, path: Path, fps: float = 10.0) -> Path:
    """The frames (RGB arrays) as an animated GIF at ``fps``, without captions."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
    return path
