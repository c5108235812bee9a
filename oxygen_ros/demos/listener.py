"""What every demo shares: the listener that subscribes to both nodes' outputs, prints the stream and judges it
against the simulator's truth (the table-top arm's views and questions by default), starting and stopping the
two nodes' processes, the printed results and the episode GIF. Each robot's demo (``tabletop``, ``aloha``) builds
on it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from oxygen_ros.sim.media import AnswerOut, EpisodeLog, TextOut, gif_frame_count, write_gif
from oxygen_ros.sim.phrasing import target_in
from oxygen_ros.sim.questions import ANSWER_MAX_TOKENS, demo_questions

ROOT = Path(__file__).resolve().parents[2]
ASK_AFTER_S = (0.5, 2.5)  # episode time at which each of the two questions is sent


def say(text: str) -> None:
    print(text, flush=True)


class Listener:
    """Subscribes to both nodes' outputs, prints the stream and keeps one `EpisodeLog` per episode.

    The table-top arm's; another robot's demo overrides what differs: the views it records
    (`_subscribe_views`), what its episode reports say (`_outcome`), its questions (`question`, `ask_after_s`)."""

    ask_after_s = ASK_AFTER_S  # episode time at which each question is sent
    camera_labels: tuple[str, ...] = ()  # the views side by side on the viewer, named on the GIF

    def __init__(self, node, label: str = "") -> None:  # noqa: ANN001 (rclpy Node)
        from oxygen_ros_msgs.msg import ActionChunk, TextDelta
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import String

        latched = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.label = label  # put before every line printed (the arm's name when there are several)
        self.episodes: list[EpisodeLog] = []
        self.ended = 0
        self.chunks: list = []
        self._parts: dict[int, list[str]] = {}
        self._early_labels: list[dict] = []  # labels of an episode whose start has not arrived yet
        self._began_ns: dict[int, int] = {}  # when each episode's scene appeared
        self._said = {"language": "", "memory": ""}
        node.create_subscription(String, "oxygen_sim_node/episode", self._on_episode, latched)
        node.create_subscription(String, "oxygen_sim_node/labels", self._on_labels, latched)
        self._subscribe_views(node)
        node.create_subscription(ActionChunk, "oxygen_node/action_chunk", self.chunks.append, 50)
        for task in ("language", "memory"):
            node.create_subscription(TextDelta, f"oxygen_node/text/{task}", self._on_delta, 200)
        from oxygen_ros_msgs.action import Ask
        from rclpy.action import ActionClient

        self._node = node
        self._ask = ActionClient(node, Ask, "oxygen_node/ask")
        self._asked: dict[int, int] = {}  # episode index -> questions sent
        self._resolved = 0  # questions answered, refused or not accepted
        self._open: dict[int, int] = {}  # episode index -> its questions not resolved yet
        self._end_lines: dict[int, str] = {}  # an episode's end line, held until its answers are printed
        node.create_timer(0.1, self._maybe_ask)

    def _subscribe_views(self, node) -> None:  # noqa: ANN001
        """The recordings of an episode: the large base view, the wrist view and the joints."""
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image, JointState

        node.create_subscription(Image, "camera/viewer/image_raw", self._on_view, 20)
        node.create_subscription(Image, "camera/wrist/image_raw", self._on_wrist, qos_profile_sensor_data)
        node.create_subscription(JointState, "joint_states", self._on_joints, qos_profile_sensor_data)

    def _outcome(self, e: dict) -> tuple[float | None, str]:
        """An episode's end report → (seconds to success or None, the verdict in words)."""
        verdict = f"SUCCESS in {e['time_to_success_s']:.1f} s" if e["success"] else "FAILED (time limit)"
        return e["time_to_success_s"], verdict

    def question(self, log: EpisodeLog, i: int) -> str:
        """The episode's i-th question."""
        return demo_questions(target_in(log.instruction) or "red cup")[i]

    def question_due(self, log: EpisodeLog, i: int, now_ns: int) -> bool:
        """Whether the episode's i-th question goes out now: at its time of episode clock (``ask_after_s``)."""
        return i < len(self.ask_after_s) and now_ns >= log.start_ns + self.ask_after_s[i] * 1e9

    def _say(self, text: str) -> None:
        say("\n".join(f"{self.label}{line}" if line else line for line in text.split("\n")))

    @property
    def questions_open(self) -> int:
        """Questions sent whose answer has not arrived yet."""
        return sum(self._asked.values()) - self._resolved

    @property
    def current(self) -> EpisodeLog | None:
        return self.episodes[-1] if self.episodes else None

    def _on_episode(self, msg) -> None:  # noqa: ANN001
        e = json.loads(msg.data)
        known = next((ep for ep in self.episodes if ep.index == e["index"]), None)
        if e["event"] == "start" and known is not None:  # restated once the policy was there: the real clock start
            known.start_ns = e["clock_start_ns"]
            return
        if e["event"] == "start":
            self.flush_end_lines()  # an episode whose answers are still out: its end line before the next block
            log = EpisodeLog(e["index"], e["instruction"], e["clock_start_ns"], camera_labels=self.camera_labels)
            self.episodes.append(log)
            self._began_ns[log.index] = e["stamp_ns"]
            log.labels += [(x["stamp_ns"], x["subtask"], x["memory"]) for x in self._early_labels if x["episode"] == log.index]
            log.truths += [(x["stamp_ns"], x.get("answers") or {}) for x in self._early_labels if x["episode"] == log.index]
            self._said = {"language": "", "memory": ""}
            self._say(f"\n=== episode {e['index'] + 1}: \"{e['instruction']}\" (scene seed {e['seed']})")
            return
        log = next(ep for ep in self.episodes if ep.index == e["index"])
        log.time_to_success_s, verdict = self._outcome(e)
        log.end_ns, log.success = e["stamp_ns"], e["success"]
        self.ended += 1
        right = [ok for _, ok in log.judged("language")]
        share = f"{sum(right)}/{len(right)} narrations named the true subtask" if right else "no narration"
        self._end_lines[log.index] = f"=== episode {e['index'] + 1}: {verdict}; {share}"
        if not self._open.get(log.index):
            self._say(self._end_lines.pop(log.index))

    def flush_end_lines(self) -> None:
        """Print the end lines still held for answers that did not come."""
        for index in sorted(self._end_lines):
            self._say(self._end_lines.pop(index))

    def _resolve(self, log: EpisodeLog) -> None:
        """One of the episode's questions is settled; its end line follows its last answer."""
        self._resolved += 1
        self._open[log.index] = self._open.get(log.index, 1) - 1
        if not self._open[log.index] and log.index in self._end_lines:
            self._say(self._end_lines.pop(log.index))

    def _on_labels(self, msg) -> None:  # noqa: ANN001
        e = json.loads(msg.data)
        log = next((ep for ep in self.episodes if ep.index == e["episode"]), None)
        if log is None:
            self._early_labels.append(e)
        else:
            log.labels.append((e["stamp_ns"], e["subtask"], e["memory"]))
            log.truths.append((e["stamp_ns"], e.get("answers") or {}))

    def _maybe_ask(self) -> None:
        """Send the episode's next question once its time has come (episode clock) and the server is there."""
        from oxygen_ros_msgs.action import Ask

        log = self.current
        if log is None or log.end_ns or not self._ask.server_is_ready():
            return
        sent = self._asked.get(log.index, 0)
        if not self.question_due(log, sent, self._node.get_clock().now().nanoseconds):
            return
        question = self.question(log, sent)
        self._asked[log.index] = sent + 1
        self._open[log.index] = self._open.get(log.index, 0) + 1
        future = self._ask.send_goal_async(Ask.Goal(question=question, max_tokens=ANSWER_MAX_TOKENS))
        future.add_done_callback(lambda f, q=question, ep=log: self._accepted(f, q, ep))

    def _accepted(self, future, question: str, log: EpisodeLog) -> None:  # noqa: ANN001
        handle = future.result()
        if handle is None or not handle.accepted:
            self._say(f"  [asked] {question} → not accepted")
            self._resolve(log)
            return
        handle.get_result_async().add_done_callback(lambda f: self._answered(f, question, log))

    def _answered(self, future, question: str, log: EpisodeLog) -> None:  # noqa: ANN001
        from oxygen_ros.interface.convert import stamp_to_ns

        r = future.result().result
        if r.finish_reason in ("refused", "error", "cancelled"):
            self._say(f"  [asked] {question} → {r.finish_reason}: {r.message}")
            self._resolve(log)
            return
        source = stamp_to_ns(r.frame_stamp)
        # The scene it was answered from: a question asked as an episode ends is answered by the next one's first frame.
        about = self._episode_at(source) or log
        out = AnswerOut(question, r.answer.strip(), source, self._node.get_clock().now().nanoseconds, about.truth_at(source, question))
        about.answers.append(out)
        truth = "" if out.mark != "✗" else f" (true: {out.truth})"
        # an answer can arrive after its episode ended (and the next one began): say which episode it is about
        where = "" if about is self.current and not about.end_ns else f" in episode {about.index + 1}"
        where += "" if about is log else f", asked in episode {log.index + 1}"
        self._say(f"  [asked{where}] {question} → {out.answer}  {out.mark}{truth}")
        self._resolve(log)

    def _episode_at(self, stamp_ns: int) -> EpisodeLog | None:
        """The episode whose scene a frame of that stamp shows: the last one begun at or before it."""
        begun = [log for log in self.episodes if self._began_ns.get(log.index, log.start_ns) <= stamp_ns]
        return begun[-1] if begun else None

    def _on_view(self, msg) -> None:  # noqa: ANN001
        from oxygen_ros.interface.convert import image_to_array, stamp_to_ns

        log, stamp = self.current, stamp_to_ns(msg.header.stamp)
        if log is not None and (not log.end_ns or stamp <= log.end_ns):  # the scene it ended in may come after the end report
            log.frames.append((stamp, image_to_array(msg).copy()))

    def _on_wrist(self, msg) -> None:  # noqa: ANN001
        from oxygen_ros.interface.convert import image_to_array, stamp_to_ns

        if self.current is not None and not self.current.end_ns:
            self.current.wrist.append((stamp_to_ns(msg.header.stamp), image_to_array(msg).copy()))

    def _on_joints(self, msg) -> None:  # noqa: ANN001
        from oxygen_ros.interface.convert import stamp_to_ns

        if self.current is not None and not self.current.end_ns and len(msg.position) >= 3:
            self.current.joints.append((stamp_to_ns(msg.header.stamp), np.asarray(msg.position, dtype=float)))

    def _on_delta(self, msg) -> None:  # noqa: ANN001
        from oxygen_ros.interface.convert import stamp_to_ns

        parts = self._parts.setdefault(msg.request_id, [])
        parts.append(msg.text)
        if not msg.final:
            return
        text = "".join(self._parts.pop(msg.request_id)).strip()
        log = self.current
        if log is None or msg.finish_reason == "cancelled":
            return
        source = stamp_to_ns(msg.source_stamp)
        if source < self._began_ns.get(log.index, 0):  # forked from the previous episode's scene
            return
        log.texts.append(TextOut(msg.task, text, source, stamp_to_ns(msg.header.stamp)))
        if text != self._said[msg.task]:  # print what changes, not every repetition
            self._said[msg.task] = text
            truth = log.label_at(source)[0 if msg.task == "language" else 1]
            mark = "" if truth is None else ("  ✓" if text.lower() == truth.lower() else f"  ✗ (true: {truth})")
            self._say(f"  [{'narration' if msg.task == 'language' else 'memory'}] {text}{mark}")


def spin_until(executor, condition, timeout_s: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        executor.spin_once(timeout_sec=0.05)
    return condition()


def stop(*procs: subprocess.Popen) -> None:
    """SIGINT to all at once (each shuts down cleanly), then wait; kill what hangs."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


QUIET = ["--log-level", "warn"]  # the demo prints what matters; the nodes' warnings and errors still show
POLICY_STREAMS = ("oxygen_node/action_chunk", "oxygen_node/text/language", "oxygen_node/text/memory")


def start_policy(params: Path, ros_args: list[str]) -> subprocess.Popen:
    """``oxygen_node`` in a process of its own, quiet but for warnings and errors."""
    return subprocess.Popen([sys.executable, "-m", "oxygen_ros.ros.main", "--params-file", str(params), "--ros-args",
                             *ros_args, *QUIET], cwd=ROOT)  # fmt: skip


def start_sim(params: Path, ros_args: list[str]) -> subprocess.Popen:
    """``oxygen_sim_node`` in a process of its own, quiet but for warnings and errors."""
    return subprocess.Popen([sys.executable, "-m", "oxygen_ros.sim_ros.main", "--params-file", str(params), "--ros-args",
                             *ros_args, *QUIET], cwd=ROOT)  # fmt: skip


def wait_for_policy(executor, nodes: list, policy: subprocess.Popen, timeout_s: float = 150.0) -> bool:  # noqa: ANN001
    """Until every listener node sees the policy's streams (DDS discovery takes up to a few seconds: an episode
    started before would send its first narration to no one); False, said, when the policy did not come up."""
    ready = spin_until(executor, lambda: all(n.count_publishers(t) for n in nodes for t in POLICY_STREAMS)
                       or policy.poll() is not None, timeout_s)  # fmt: skip
    if not ready or policy.poll() is not None:
        say("oxygen_node did not come up; see its messages above")
        return False
    return True


def check_run_rules(parser: argparse.ArgumentParser, policy_params: Path, default_params: str, model: str, how: str) -> None:
    """Refuse (parser.error) outside scripts/demo.sh's network rule, or without the committed model the default
    params file names."""
    if os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") != "LOCALHOST":
        parser.error("run the demo through scripts/demo.sh (it keeps DDS on this machine)")
    if not (ROOT / model / "model.safetensors").is_file() and policy_params.name == default_params:
        parser.error(f"the trained policy {model} is missing (`{how}` makes it; the README says how)")


def report_figures(listener: Listener, elapsed: float, who: str = "") -> list[EpisodeLog]:
    """Print the results of the finished episodes (success, texts judged, answers, chunk latencies); returns them."""
    listener.flush_end_lines()
    logs = [log for log in listener.episodes if log.end_ns]
    say(f"\n[3/3] {who}results ({elapsed:.0f} s)")
    if not logs:
        say("  no episode finished")
        return []
    wins = sum(log.success for log in logs)
    judged = [ok for log in logs for _, ok in log.judged("language")]
    memory = [ok for log in logs for _, ok in log.judged("memory")]
    say(f"  success: {wins}/{len(logs)} episodes")
    if judged:
        say(f"  narration named the true subtask in {sum(judged)}/{len(judged)} outputs ({100 * sum(judged) / len(judged):.0f} %)")
    if memory:
        say(f"  memory notes right in {sum(memory)}/{len(memory)} outputs ({100 * sum(memory) / len(memory):.0f} %)")
    answers = [a.mark == "✓" for log in logs for a in log.answers if a.mark]
    if answers:
        say(f"  answers right in {sum(answers)}/{len(answers)} questions asked over ~/ask")
    chunks = listener.chunks
    if chunks:
        pre = statistics.median(c.prefill_latency_s for c in chunks) * 1e3
        act = statistics.median(c.action_latency_s for c in chunks) * 1e3
        say(f"  {len(chunks)} action chunks; median prefill {pre:.1f} ms, action chunk {act:.1f} ms (engine mode {chunks[-1].engine_mode})")
    return logs


def say_tools(examples: str) -> None:
    """The closing line: where the tools are (scripts/demo.sh puts nothing on PATH) and what to run next."""
    say(f"\nThe tools are in .venv/bin: `source .venv/bin/activate`, then e.g. {examples}")


def write_episode_gif(logs: list[EpisodeLog], path: Path, width: int = 320) -> Path | None:
    """The GIF of the first successful episode (else the first with frames), ``width`` pixels of camera view wide."""
    shown = next((log for log in logs if log.success and log.frames), next((log for log in logs if log.frames), None))
    if shown is None:
        say("  no camera frames were recorded: no GIF")
        return None
    gif = write_gif(shown, path, width=width)
    held = gif_frame_count(gif)
    merged = f" from {len(shown.frames)} camera frames, repeats merged" if held != len(shown.frames) else ""
    say(f"  wrote {gif} (episode {shown.index + 1}, {held} frames{merged}, captions = the streamed text)")
    return gif


ROBOTS = ("tabletop", "aloha")


def add_run_args(parser: argparse.ArgumentParser, first_seed: int, out: str, policy_params: str, sim_params: str) -> None:
    """The options every demo takes: episodes, first seed, output folder (under out/), both nodes' params files
    (under config/)."""
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=first_seed, help=f"first held-out scene seed (default {first_seed})")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / out)
    parser.add_argument("--policy-params", type=existing_file, default=ROOT / "config" / policy_params)
    parser.add_argument("--sim-params", type=existing_file, default=ROOT / "config" / sim_params)


def existing_file(text: str) -> Path:
    """An argparse type: a path that names a file (argparse then says "argument --policy-params: no such file: …",
    not the node's YAML parser)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return path
