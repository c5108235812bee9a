"""oxygen-replay eval on recordings as teams make them: several episodes (with pauses, or with episode
events) judged each on its own with the tick grid restarted; cameras stamped late against the joint states
warned about; commands recorded in other units named with the units they look like; a damaged bag judged
with its own exit code; a bag that cannot be judged refused before the model loads."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_replay_eval import ARM, NS, env, keep, params, rewrite, run_eval  # noqa: F401 - env is a fixture

from oxygen_ros.replay.bagio import IMAGE, JOINT_STATE, STRING, BagReader, BagWriter, _default_typestore
from oxygen_ros.replay.unit_hints import Ranges, unit_hint

pytestmark = pytest.mark.usefixtures("one_torch_thread")
EPISODE_TOPIC = "/oxygen_sim_node/episode"


def _shift_stamp(msg: Any, offset_ns: int) -> None:
    stamp = msg.header.stamp
    total = stamp.sec * NS + stamp.nanosec + offset_ns
    stamp.sec, stamp.nanosec = divmod(total, NS)


def _copies(src: Path, dst: Path, offsets_ns: list[int], events: bool = False) -> Path:
    """The bag recorded again at each offset (recorded times and header stamps moved alike), optionally with an
    episode start and end event around each copy."""
    typestore = _default_typestore()
    with BagReader(src) as reader:
        raw = [(m.topic, m.msgtype, m.timestamp_ns, m) for m in reader.messages()]
        start, end = reader.start_ns, reader.end_ns
        out = []
        for index, offset in enumerate(offsets_ns):
            for topic, msgtype, at, m in raw:
                msg = reader.deserialize(m)
                if hasattr(msg, "header"):
                    _shift_stamp(msg, offset)
                out.append((at + offset, topic, msgtype, msg))
            if events:
                for kind, at in (("start", start + offset), ("end", end + offset)):
                    data = json.dumps({"event": kind, "index": index})
                    out.append((at, EPISODE_TOPIC, STRING, typestore.types[STRING](data=data)))
    with BagWriter(dst, overwrite=True) as writer:
        for at, topic, msgtype, msg in sorted(out, key=lambda m: (m[0], m[1] != EPISODE_TOPIC)):
            writer.write(topic, msgtype, at, msg)
    return dst


def _duration_ns(bag: Path) -> int:
    with BagReader(bag) as reader:
        return reader.end_ns - reader.start_ns


@pytest.mark.parametrize("layout", ["pause", "events"])
def test_each_episode_is_judged_on_its_own_with_its_own_ticks(env: SimpleNamespace, capsys: pytest.CaptureFixture[str],
                                                              layout: str) -> None:  # fmt: skip
    length = _duration_ns(env.bag)
    # a 2.03 s pause (not a whole number of ticks), or episodes back to back a third of a tick apart with events
    second = length + (2_030_000_000 if layout == "pause" else 70_000_000)
    bag = _copies(env.bag, env.dir / f"two_{layout}.mcap", [0, second], events=layout == "events")
    code, summary, err = run_eval(capsys, bag, env.good, "--max-mae", "1e-9")
    assert code == 0, err
    episodes = summary["episodes"]
    assert [e["source"] for e in episodes] == (["gap", "gap"] if layout == "pause" else ["topic", "topic"])
    assert [e["chunks"] for e in episodes] == [14, 14] and summary["chunks"] == 28  # no tick inside the pause
    for ep in episodes:  # the node's own commands, in each episode: exact again (grid and noise restart)
        assert set(ep["executed_mae"].values()) == {0.0}, ep
    assert math.isclose(episodes[1]["start_s"], second / NS, abs_tol=1e-6)
    assert not any("outside" in w for w in summary["warnings"])  # 70 ms between the episodes: less than a tick
    ticks = (bag.parent / f"{bag.stem}_good_eval" / "ticks.csv").read_text().splitlines()
    assert ticks[1].startswith("0,0,") and any(row.startswith("1,0,") for row in ticks)  # episode 1 starts at tick 0


def test_time_outside_the_episode_events_is_said(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    length = _duration_ns(env.bag)
    bag = _copies(env.bag, env.dir / "events_apart.mcap", [0, length + 1_500_000_000], events=True)
    code, summary, err = run_eval(capsys, bag, env.good)
    assert code == 0, err
    assert [e["chunks"] for e in summary["episodes"]] == [14, 14]
    outside = [w for w in summary["warnings"] if "outside its 2 episodes" in w]
    assert len(outside) == 1 and outside[0].startswith("1.50 s of the bag"), summary["warnings"]


def test_a_pause_is_not_interpolated_across(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    states = env.dir / "states_pause.yaml"
    states.write_text(env.good.read_text().replace('"j1,j2,j3,j4,j5,j6,j7", gripper', '"j1,j2,j3,j4,j5,j6,j7", j1'))
    length = _duration_ns(env.bag)
    bag = _copies(env.bag, env.dir / "pause_states.mcap", [0, length + 2 * NS])
    code, summary, err = run_eval(capsys, bag, states, "--against", "states")
    assert code == 0, err
    assert len(summary["episodes"]) == 2
    one = run_eval(capsys, env.bag, states, "--against", "states")[1]
    # compared steps: twice one episode's, none in the pause between them
    assert summary["dims"]["j1"]["compared"] == 2 * one["dims"]["j1"]["compared"]


def test_a_camera_stamped_late_is_warned_about_and_measured(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    def late(topic: str, msgtype: str, at: int, msg: Any) -> list:
        if topic == "/camera/wrist/image_raw":
            _shift_stamp(msg, -300_000_000)
        return keep(topic, msgtype, at, msg)

    bag = rewrite(env.bag, env.dir / "late_camera.mcap", late)
    code, summary, err = run_eval(capsys, bag, env.good)
    assert code == 0, err
    cams = summary["input_timing"]["cameras"]
    assert cams["/camera/wrist/image_raw"]["offset_to_joint_states_s"] == pytest.approx(-0.3, abs=0.005)
    assert abs(cams["/camera/base/image_raw"]["offset_to_joint_states_s"]) < 0.005
    warned = [line for line in err.splitlines() if "stamps are" in line]
    assert len(warned) == 1 and "/camera/wrist/image_raw's stamps are 0.300 s behind the joint states'" in warned[0]
    assert summary["warnings"][0] == warned[0].split("warning: ", 1)[1]
    _, clean, clean_err = run_eval(capsys, env.bag, env.good)
    assert "stamps are" not in clean_err and not any("stamps are" in w for w in clean["warnings"])


def test_commands_in_other_units_are_named_each_with_the_units(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    def degrees(topic: str, msgtype: str, at: int, msg: Any) -> list:
        if topic == ARM:
            for point in msg.points:
                point.positions = point.positions * (180 / math.pi)
        return keep(topic, msgtype, at, msg)

    bag = rewrite(env.bag, env.dir / "degrees.mcap", degrees)
    code, summary, err = run_eval(capsys, bag, env.good, "--max-mae", "1e-6")
    assert code == 1
    failed = [line for line in err.splitlines() if "eval failed: " in line]
    assert sorted(line.split("eval failed: ")[1].split(":")[0] for line in failed) == [f"j{i}" for i in range(1, 8)]
    assert all("degrees recorded where the policy commands rad" in line for line in failed), failed
    assert summary["dims"]["gripper"]["unit_hint"] is None and len(summary["failures"]) == 7


def test_unit_hints() -> None:
    assert "normalized to 0..1" in unit_hint(Ranges((0.0, 1.0), (-0.62, 1.49)))  # a gripper sent 0..1, the policy's rad
    assert "the policy looks normalized" in unit_hint(Ranges((-0.62, 1.49), (0.0, 1.0)))
    assert "degrees recorded where the policy commands rad" in unit_hint(Ranges((-90.0, 90.0), (-1.57, 1.57)))
    assert "rad recorded where the policy commands degrees" in unit_hint(Ranges((-1.57, 1.57), (-90.0, 90.0)))
    assert "mm recorded where the policy commands m" in unit_hint(Ranges((0.0, 80.0), (0.0, 0.081)))
    assert unit_hint(Ranges((-1.0, 1.0), (-1.1, 0.9))) is None  # one unit, an error
    assert unit_hint(Ranges((0.1, 0.9), (0.0, 1.0))) is None
    assert unit_hint(Ranges((0.0, 1.0), (0.5, 0.5))) is None  # a policy that does not move says nothing


def test_a_damaged_bag_is_judged_with_its_own_exit_code(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[int] = []

    def garble(topic: str, msgtype: str, at: int, msg: Any) -> list:
        if msgtype == IMAGE and topic == "/camera/base/image_raw":
            seen.append(at)
            if len(seen) == 5:
                return [(topic, msgtype, at, b"\x00\x01\x00\x00garbage")]  # CDR that does not decode
        return keep(topic, msgtype, at, msg)

    bag = rewrite(env.bag, env.dir / "garbled.mcap", garble)
    code, summary, err = run_eval(capsys, bag, env.good, "--max-mae", "10")
    assert code == 3 and summary["exit_code"] == 3 and summary["passed"], err
    assert summary["damage"] == {"truncated": False, "undecodable_messages": 1}
    note = [line for line in err.splitlines() if "damaged bag" in line]
    assert len(note) == 1 and "1 messages that do not decode" in note[0] and "within the thresholds" in note[0]
    assert summary["chunks"] > 0


def test_a_bag_that_cannot_be_judged_is_refused_before_the_model_loads(env: SimpleNamespace, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    def no_wrist(topic: str, msgtype: str, at: int, msg: Any) -> list:
        return [] if topic == "/camera/wrist/image_raw" else keep(topic, msgtype, at, msg)

    bag = rewrite(env.bag, env.dir / "no_wrist.mcap", no_wrist)
    broken_model = tmp_path / "model"
    broken_model.mkdir()
    (broken_model / "config.json").write_text("{not json")  # loading it would fail with a model error
    unloadable = tmp_path / "unloadable.yaml"
    unloadable.write_text(env.good.read_text().replace("model_preset: tiny", f"checkpoint: {broken_model}"))
    code, _, err = run_eval(capsys, bag, unloadable)
    assert code == 2 and "camera topic /camera/wrist/image_raw is not in the bag" in err, err
    code, _, err = run_eval(capsys, env.bag, unloadable)  # the same model on a good bag: the model's error
    assert code == 2 and "camera topic" not in err and str(broken_model) in err, err


def test_episode_events_back_to_back_bound_each_episode() -> None:
    from oxygen_ros.replay.episodes import from_events, from_gaps, tick_instants

    # the simulator's recorder: an episode's end and the next one's start at the same instant
    episodes = from_events([0, 8 * NS, 16 * NS], [8 * NS, 16 * NS, 24 * NS], 24 * NS)
    assert [(e.start_ns, e.end_ns) for e in episodes] == [(0, 8 * NS), (8 * NS, 16 * NS), (16 * NS, 24 * NS)]
    assert [(e.start_ns, e.end_ns) for e in from_events([0, 5 * NS], [], 9 * NS)] == [(0, 5 * NS), (5 * NS, 9 * NS)]
    paused = from_gaps([0, NS // 2, NS, 3 * NS, 3 * NS + NS // 2], 1.0, 0, 4 * NS, 0)
    assert [(e.start_ns, e.end_ns, e.source) for e in paused] == [(0, NS, "gap"), (3 * NS, 3 * NS + NS // 2, "gap")]
    assert from_gaps([0, NS // 2, NS], 1.0, -5, 2 * NS, 0)[0].source == "bag"
    ticks = tick_instants(paused, NS // 2, 2.0)
    assert ticks == [(0, 0), (0, NS // 2), (0, NS), (1, 3 * NS), (1, 3 * NS + NS // 2)]


def test_a_truncated_bag_is_judged_up_to_the_damage_with_its_own_exit_code(env: SimpleNamespace,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    import numpy as np

    def big_images(topic: str, msgtype: str, at: int, msg: Any) -> list:
        if msgtype == IMAGE:  # ~100 kB frames: the bag spans several 1 MiB MCAP chunks, so a cut leaves whole ones
            rgb = np.random.default_rng(at % 2**32).integers(0, 255, (160, 220, 3), dtype=np.uint8)
            msg.height, msg.width, msg.step, msg.data = 160, 220, 660, rgb.reshape(-1)
        return keep(topic, msgtype, at, msg)

    twice = _copies(env.bag, env.dir / "twice.mcap", [0, _duration_ns(env.bag) + 200_000_000])  # 5.4 s, one episode
    big = rewrite(twice, env.dir / "big.mcap", big_images)
    cut = env.dir / "cut.mcap"
    data = big.read_bytes()
    cut.write_bytes(data[: int(len(data) * 0.9)])
    code, summary, err = run_eval(capsys, cut, env.good, "--max-mae", "100")
    assert code == 3 and summary["exit_code"] == 3 and summary["damage"]["truncated"], err
    assert 14 < summary["chunks"] < 28 and len(summary["episodes"]) == 1
    note = [line for line in err.splitlines() if "damaged bag" in line]
    assert len(note) == 1 and "truncated: read up to the damage" in note[0]
