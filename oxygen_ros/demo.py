"""The README's main job: the trained demo policy drives the simulated arm over real DDS and explains itself.

1. start ``oxygen_sim_node`` (``config/demo_sim.yaml``) and ``oxygen_node`` with the trained demo policy
   (``config/demo_policy.yaml``), each in its own process;
2. run a few episodes with different instructions; print the narration and the memory notes as they stream,
   ask the policy two questions per episode over ``~/ask`` (where the named object is, what the gripper
   holds), each answer marked ✓/✗ against the simulator's truth at the frame it was answered from, and
   each episode's outcome;
3. write an animated GIF of one episode with the streamed text as captions, and a PNG summary.

``--robots N`` (N > 1) runs N simulated arms, each in its own namespace (``/arm1``, ``/arm2``, ...) with its
own scenes and instructions, all driven by ONE ``oxygen_node`` (its ``robots`` parameter): one model in memory,
every arm's frames in one batched engine tick; each arm's results go to ``<out>/<arm>``.

Run it through ``scripts/demo.sh``, which also keeps DDS on loopback.
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

from oxygen_ros.sim.media import AnswerOut, EpisodeLog, TextOut, gif_frame_count, write_gif, write_summary
from oxygen_ros.sim.phrasing import target_in
from oxygen_ros.sim.questions import ANSWER_MAX_TOKENS, demo_questions

ROOT = Path(__file__).resolve().parents[1]
DEMO_SEED = 40  # the demo's first held-out scene seed (its instructions name different objects)
ASK_AFTER_S = (0.5, 2.5)  # episode time at which each of the two questions is sent


def _say(text: str) -> None:
    print(text, flush=True)


class Listener:
    """Subscribes to both nodes' outputs, prints the stream and keeps one `EpisodeLog` per episode."""

    def __init__(self, node, label: str = "") -> None:  # noqa: ANN001 (rclpy Node)
        from oxygen_ros_msgs.msg import ActionChunk, TextDelta
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from sensor_msgs.msg import Image, JointState
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
        node.create_subscription(Image, "camera/viewer/image_raw", self._on_view, 20)
        node.create_subscription(Image, "camera/wrist/image_raw", self._on_wrist, qos_profile_sensor_data)
        node.create_subscription(JointState, "joint_states", self._on_joints, qos_profile_sensor_data)
        node.create_subscription(ActionChunk, "oxygen_node/action_chunk", self.chunks.append, 50)
        for task in ("language", "memory"):
            node.create_subscription(TextDelta, f"oxygen_node/text/{task}", self._on_delta, 200)
        from oxygen_ros_msgs.action import Ask
        from rclpy.action import ActionClient

        self._node = node
        self._ask = ActionClient(node, Ask, "oxygen_node/ask")
        self._asked: dict[int, int] = {}  # episode index -> questions sent
        node.create_timer(0.1, self._maybe_ask)

    def _say(self, text: str) -> None:
        _say("\n".join(f"{self.label}{line}" if line else line for line in text.split("\n")))

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
            log = EpisodeLog(e["index"], e["instruction"], e["clock_start_ns"])
            self.episodes.append(log)
            self._began_ns[log.index] = e["stamp_ns"]
            log.labels += [(x["stamp_ns"], x["subtask"], x["memory"]) for x in self._early_labels if x["episode"] == log.index]
            log.truths += [(x["stamp_ns"], x.get("answers") or {}) for x in self._early_labels if x["episode"] == log.index]
            self._said = {"language": "", "memory": ""}
            self._say(f"\n=== episode {e['index'] + 1}: \"{e['instruction']}\" (scene seed {e['seed']})")
            return
        log = next(ep for ep in self.episodes if ep.index == e["index"])
        log.end_ns, log.success, log.time_to_success_s = e["stamp_ns"], e["success"], e["time_to_success_s"]
        self.ended += 1
        right = [ok for _, ok in log.judged("language")]
        share = f"{sum(right)}/{len(right)} narrations named the true subtask" if right else "no narration"
        verdict = f"SUCCESS in {e['time_to_success_s']:.1f} s" if e["success"] else "FAILED (time limit)"
        self._say(f"=== episode {e['index'] + 1}: {verdict}; {share}")

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
        now = self._node.get_clock().now().nanoseconds
        if sent >= len(ASK_AFTER_S) or now < log.start_ns + ASK_AFTER_S[sent] * 1e9:
            return
        question = demo_questions(target_in(log.instruction) or "red cup")[sent]
        self._asked[log.index] = sent + 1
        future = self._ask.send_goal_async(Ask.Goal(question=question, max_tokens=ANSWER_MAX_TOKENS))
        future.add_done_callback(lambda f, q=question, ep=log: self._accepted(f, q, ep))

    def _accepted(self, future, question: str, log: EpisodeLog) -> None:  # noqa: ANN001
        handle = future.result()
        if handle is None or not handle.accepted:
            self._say(f"  [asked] {question} → not accepted")
            return
        handle.get_result_async().add_done_callback(lambda f: self._answered(f, question, log))

    def _answered(self, future, question: str, log: EpisodeLog) -> None:  # noqa: ANN001
        from oxygen_ros.interface.convert import stamp_to_ns

        r = future.result().result
        if r.finish_reason in ("refused", "error", "cancelled"):
            self._say(f"  [asked] {question} → {r.finish_reason}: {r.message}")
            return
        source = stamp_to_ns(r.frame_stamp)
        out = AnswerOut(question, r.answer.strip(), source, self._node.get_clock().now().nanoseconds, log.truth_at(source, question))
        log.answers.append(out)
        truth = "" if out.mark != "✗" else f" (true: {out.truth})"
        # an answer can arrive after its episode ended (and the next one began): say which episode it is about
        where = "" if log is self.current and not log.end_ns else f" in episode {log.index + 1}"
        self._say(f"  [asked{where}] {question} → {out.answer}  {out.mark}{truth}")

    def _on_view(self, msg) -> None:  # noqa: ANN001
        from oxygen_ros.interface.convert import image_to_array, stamp_to_ns

        if self.current is not None and not self.current.end_ns:
            self.current.frames.append((stamp_to_ns(msg.header.stamp), image_to_array(msg).copy()))

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


def _spin_until(executor, condition, timeout_s: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        executor.spin_once(timeout_sec=0.05)
    return condition()


def _stop(*procs: subprocess.Popen) -> None:
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


def robot_names(count: int) -> list[str]:
    """The arms' namespaces: none for one arm (topics as in the params files), arm1..armN for several."""
    return [f"arm{i + 1}" for i in range(count)] if count > 1 else []


def run(episodes: int, seed: int, outdir: Path, policy_params: Path, sim_params: Path, robots: int = 1) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    python = sys.executable
    quiet = ["--log-level", "warn"]  # this process prints what matters; warnings and errors still show
    names = robot_names(robots)
    served = f" serving {len(names)} arms ({', '.join(names)}) from one model" if names else ""
    _say(f"[1/3] starting oxygen_node with the trained demo policy ({policy_params.name}){served}")
    fleet = ["-p", f"robots:=[{','.join(names)}]"] if names else []
    policy = subprocess.Popen([python, "-m", "oxygen_ros.ros.main", "--params-file", str(policy_params), "--ros-args",
                               *fleet, *quiet], cwd=ROOT)  # fmt: skip
    sims: list[subprocess.Popen] = []
    rclpy.init()
    executor = SingleThreadedExecutor()
    arms = names or [""]
    nodes = [rclpy.create_node("oxygen_demo_listener", namespace=f"/{arm}" if arm else None) for arm in arms]
    listeners = [Listener(node, f"[{arm}] " if arm else "") for node, arm in zip(nodes, arms)]
    for node in nodes:
        executor.add_node(node)
    started = time.monotonic()
    # The episodes start only once this listener sees the policy's text streams (DDS discovery takes up to
    # a few seconds): otherwise the first narration could go out before anyone listens.
    streams = ["oxygen_node/action_chunk", "oxygen_node/text/language", "oxygen_node/text/memory"]
    try:
        ready = _spin_until(executor, lambda: all(n.count_publishers(t) for n in nodes for t in streams)
                            or policy.poll() is not None, 150)  # fmt: skip
        if not ready or policy.poll() is not None:
            _say("oxygen_node did not come up; see its messages above")
            return 1
        _say(f"[2/3] starting oxygen_sim_node ({sim_params.name}){f' x {len(names)}' if names else ''}: {episodes} "
             "episodes each; narration and memory as they stream, ✓/✗ against the simulator's truth")  # fmt: skip
        # The simulator waits for the policy and for this listener, and stays up until stopped here, so no
        # episode report is lost to discovery delays.
        for i, arm in enumerate(arms):
            sim_args = ["-p", f"episodes:={episodes}", "-p", f"seed:={seed + i * episodes}", "-p", "viewer_size:=192",
                        "-p", "exit_when_done:=false", "-p", "wait_for_commander_s:=60.0", "-p", "wait_for_listener:=true",
                        *(["-r", f"__ns:=/{arm}"] if arm else []), *quiet]  # fmt: skip
            sims.append(subprocess.Popen([python, "-m", "oxygen_ros.ros.sim_main", "--params-file", str(sim_params),
                                          "--ros-args", *sim_args], cwd=ROOT))  # fmt: skip
        all_ended = lambda: all(lst.ended >= episodes for lst in listeners)  # noqa: E731
        _spin_until(executor, lambda: all_ended() or any(p.poll() is not None for p in sims), 30.0 * episodes + 90)
        _spin_until(executor, all_ended, 5.0)
    finally:
        _stop(*sims, policy)
        executor.shutdown()
        for node in nodes:
            node.destroy_node()
        rclpy.shutdown()
    elapsed = time.monotonic() - started
    codes = [_report(lst, outdir / arm if arm else outdir, elapsed, f"{arm}: " if arm else "") for lst, arm in zip(listeners, arms)]
    return max(codes)


def _report(listener: Listener, outdir: Path, elapsed: float, who: str = "") -> int:
    logs = [log for log in listener.episodes if log.end_ns]
    _say(f"\n[3/3] {who}results ({elapsed:.0f} s)")
    if not logs:
        _say("  no episode finished")
        return 1
    wins = sum(log.success for log in logs)
    judged = [ok for log in logs for _, ok in log.judged("language")]
    memory = [ok for log in logs for _, ok in log.judged("memory")]
    _say(f"  success: {wins}/{len(logs)} episodes")
    if judged:
        _say(f"  narration named the true subtask in {sum(judged)}/{len(judged)} outputs ({100 * sum(judged) / len(judged):.0f} %)")
    if memory:
        _say(f"  memory notes right in {sum(memory)}/{len(memory)} outputs ({100 * sum(memory) / len(memory):.0f} %)")
    answers = [a.mark == "✓" for log in logs for a in log.answers if a.mark]
    if answers:
        _say(f"  answers right in {sum(answers)}/{len(answers)} questions asked over ~/ask")
    chunks = listener.chunks
    if chunks:
        pre = statistics.median(c.prefill_latency_s for c in chunks) * 1e3
        act = statistics.median(c.action_latency_s for c in chunks) * 1e3
        _say(f"  {len(chunks)} action chunks; median prefill {pre:.1f} ms, action chunk {act:.1f} ms (engine mode {chunks[-1].engine_mode})")
    shown = next((log for log in logs if log.success and log.frames), next((log for log in logs if log.frames), None))
    if shown is not None:
        gif = write_gif(shown, outdir / "demo_episode.gif")
        held = gif_frame_count(gif)
        merged = f" from {len(shown.frames)} camera frames, repeats merged" if held != len(shown.frames) else ""
        _say(f"  wrote {gif} (episode {shown.index + 1}, {held} frames{merged}, captions = the streamed text)")
    png = write_summary(logs, outdir / "demo_summary.png")
    _say(f"  wrote {png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="oxygen_ros demo: the trained policy drives the simulated arm over DDS")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=DEMO_SEED, help=f"first held-out scene seed (default {DEMO_SEED})")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "demo")
    parser.add_argument("--policy-params", type=Path, default=ROOT / "config" / "demo_policy.yaml")
    parser.add_argument("--sim-params", type=Path, default=ROOT / "config" / "demo_sim.yaml")
    parser.add_argument("--robots", type=int, default=1,
                        help="simulated arms, each in its own namespace, all driven by one oxygen_node (default 1)")
    args = parser.parse_args(argv)
    if not 1 <= args.robots <= 8:
        parser.error(f"--robots must be 1..8, got {args.robots}")
    if os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") != "LOCALHOST":
        parser.error("run the demo through scripts/demo.sh (it keeps DDS on this machine)")
    if not (ROOT / "models" / "demo" / "model.safetensors").is_file() and args.policy_params.name == "demo_policy.yaml":
        parser.error("the trained demo policy models/demo is missing (the README says how oxygen-train-demo makes it)")
    return run(args.episodes, args.seed, args.out.resolve(), args.policy_params.resolve(), args.sim_params.resolve(),
               args.robots)


if __name__ == "__main__":
    raise SystemExit(main())
