"""The simulated scene, its grasp physics, the scripted expert and the demonstration data (no ROS, no model)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from oxygen_ros.sim.dataset import (
    CAMERA_NAMES, STATE_DIM, TRAIN_SEED_BASE, episode_samples, expert_episode, expert_samples, training_seeds, vocabulary,
)  # fmt: skip
from oxygen_ros.sim.episode import EpisodeSpec, SimEpisode
from oxygen_ros.sim.evaluate import eval_specs
from oxygen_ros.sim.expert import SUBTASKS, expert_chunk, memory_neighbour, memory_text, object_names, subtask_text, track
from oxygen_ros.sim.phrasing import target_in
from oxygen_ros.sim.render import render
from oxygen_ros.runtime.trajectory import trajectory_points
from oxygen_ros.sim.scene import (
    PLACE_COLUMNS_M, PLACE_JITTER_M, PLACE_ROWS_M, SceneObject, inverse_kinematics as _ik,
    GRIPPER_OPEN_M, JOINT_LOWER, JOINT_NAMES, JOINT_UPPER, LIFT_SUCCESS_M, MAX_VELOCITY, Scene, fingertip, inverse_kinematics,
)  # fmt: skip


def test_inverse_kinematics_inverts_forward_kinematics() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        tip = np.array([*(rng.uniform(0.2, 0.45) * np.array([1.0, 0.0])), rng.uniform(0.01, 0.2)])
        yaw = rng.uniform(-0.6, 0.6)
        tip[:2] = tip[0] * np.array([np.cos(yaw), np.sin(yaw)])
        q = inverse_kinematics(tip)
        assert q is not None and np.all(q >= JOINT_LOWER[:3]) and np.all(q <= JOINT_UPPER[:3])
        assert np.allclose(fingertip(q), tip, atol=1e-9)
    assert inverse_kinematics(np.array([2.0, 0.0, 0.1])) is None  # out of reach


def _move(scene: Scene, tip: np.ndarray, gripper: float) -> None:
    """Drive the scene in small steps to a fingertip position and gripper opening (velocity-limited)."""
    goal = np.concatenate([inverse_kinematics(tip), [gripper]])
    for _ in range(400):
        scene.apply(track(scene.q, goal, 0.02))


def test_grasp_needs_open_fingers_around_the_object_and_lifting_it_succeeds() -> None:
    scene = Scene.random(3)
    obj = scene.objects[0]
    above = obj.position + np.array([0.0, 0.0, 0.15])
    low = obj.position + np.array([0.0, 0.0, 0.015])
    # Closed fingers pushed down onto it, then closed: no grasp.
    _move(scene, above, 0.0)
    _move(scene, low, 0.0)
    assert scene.held is None
    # Fingers closing beside it (2.5 cm off-centre): no grasp.
    _move(scene, above, GRIPPER_OPEN_M)
    _move(scene, low + np.array([0.025, 0.0, 0.0]), GRIPPER_OPEN_M)
    _move(scene, low + np.array([0.025, 0.0, 0.0]), 0.0)
    assert scene.held is None
    # Open above it, down around it, close: held, the fingers stop at its width; lift: success.
    _move(scene, above, GRIPPER_OPEN_M)
    _move(scene, low, GRIPPER_OPEN_M)
    _move(scene, low, 0.0)
    assert scene.held == 0 and scene.q[3] == pytest.approx(obj.width)
    _move(scene, above, 0.0)
    assert scene.lifted(0) and obj.position[2] >= LIFT_SUCCESS_M
    assert not scene.lifted(1)
    # Opening the fingers drops it onto the table.
    _move(scene, above, GRIPPER_OPEN_M)
    assert scene.held is None and obj.position[2] == 0.0


def test_expert_solves_held_out_seeds() -> None:
    specs = eval_specs(500, 40)
    episodes = [expert_episode(spec) for spec in specs]
    solved = sum(e.success_time_s is not None for e in episodes)
    assert solved / len(specs) >= 0.99, [e.spec for e in episodes if e.success_time_s is None]
    assert all(e.success_time_s < 6.0 for e in episodes if e.success_time_s is not None)


def test_expert_chunk_respects_velocity_limits_and_labels_follow_the_state() -> None:
    scene = Scene.random(11)
    target = 0
    chunk = expert_chunk(scene, target, 10, 0.2)
    assert chunk.shape == (10, STATE_DIM) and chunk.dtype == np.float32
    steps = np.diff(np.concatenate([scene.q[None, :3], chunk[:, :3]]), axis=0)
    assert np.all(np.abs(steps) <= MAX_VELOCITY[:3] * 0.2 + 1e-5)
    name = scene.objects[target].name
    assert subtask_text(scene, target) == SUBTASKS[0].format(name)
    assert memory_text(scene, target).startswith(name + " ") and memory_text(scene, None) is None
    assert subtask_text(scene, None) is None


def test_the_memory_note_counts_places_so_the_jitter_never_changes_it() -> None:
    """Neighbours on the next place of the row and of the column are 15 and 14 cm away: whichever the 1-cm jitter
    puts nearer, the note names the one in the row; without one there, the one in the column; a diagonal one last."""
    from oxygen_ros.sim.scene import PLACE_COLUMNS_M, PLACE_ROWS_M, SceneObject

    def scene(places: list[tuple[int, int]], jitter: np.ndarray) -> Scene:
        kinds = ("cup", "block", "ball", "cup")
        objects = [SceneObject(c, k, np.array([PLACE_ROWS_M[r] + dx, PLACE_COLUMNS_M[col] + dy, 0.0]))
                   for (r, col), c, k, (dx, dy) in zip(places, ("red", "blue", "green", "yellow"), kinds, jitter)]
        return Scene(objects, Scene.random(0).q)

    rng = np.random.default_rng(3)
    cases = {
        ((0, 1), (1, 1), (0, 2)): "red cup left of the green ball",  # row beats column
        ((0, 1), (1, 1), (0, 0)): "red cup right of the green ball",
        ((0, 1), (0, 0), (0, 2)): "red cup right of the blue block",  # two in the row: the robot's left one
        ((1, 1), (0, 1), (0, 2)): "red cup behind the blue block",  # column beats diagonal
        ((0, 0), (1, 1), (0, 2)): "red cup left of the blue block",  # only diagonal and two places away
    }
    for places, note in cases.items():
        for _ in range(20):
            table = scene(list(places), rng.uniform(-0.01, 0.01, (len(places), 2)))
            assert memory_text(table, 0) == note, places
            assert note.endswith(table.objects[memory_neighbour(table, 0)].name)  # what the note's pointing reads
    alone = scene([(0, 1)], np.zeros((1, 2)))
    assert memory_neighbour(alone, 0) is None and memory_text(alone, 0) is None


def test_cameras_show_the_objects_and_the_wrist_camera_moves_with_the_arm() -> None:
    scene = Scene.random(5)
    base, wrist = render(scene, "base", 64), render(scene, "wrist", 64)
    assert base.shape == wrist.shape == (64, 64, 3) and base.dtype == np.uint8
    colours = {"red": (205, 45, 40), "blue": (45, 80, 210), "green": (40, 165, 70), "yellow": (225, 200, 40)}
    for obj in scene.objects:  # each object's colour is visible in the base view
        distance = np.abs(base.astype(int) - np.array(colours[obj.colour])).sum(axis=2)
        assert (distance < 60).sum() >= 3, obj.name
    moved = scene.copy()
    moved.apply(moved.q + np.array([0.3, 0.0, 0.0, 0.0]))
    assert not np.array_equal(render(moved, "wrist", 64), wrist)
    assert np.array_equal(render(scene, "base", 64), base)  # deterministic
    with pytest.raises(ValueError, match="unknown camera"):
        render(scene, "side", 64)


def test_every_place_fills_its_own_patch_of_the_base_view() -> None:
    """The demo model sees the base view in 16 x 16 patches: an object on any place, at any jitter, lies
    inside one patch, and the six places have six different patches."""
    arm_away = np.concatenate([_ik(np.array([0.0, 0.3, 0.25])), [GRIPPER_OPEN_M]])  # pointing to the side
    patches = []
    for x, y in itertools.product(PLACE_ROWS_M, PLACE_COLUMNS_M):
        cells = set()
        for dx, dy in itertools.product((-PLACE_JITTER_M, PLACE_JITTER_M), repeat=2):
            for kind in ("cup", "block", "ball"):
                scene = Scene([SceneObject("red", kind, np.array([x + dx, y + dy, 0.0]))], arm_away)
                image = render(scene, "base", 64).astype(int)
                rows, cols = np.nonzero(np.abs(image - np.array((205, 45, 40))).sum(axis=2) < 120)
                assert rows.size >= 4, (x, y, kind)
                cells |= {(int(r) // 16, int(c) // 16) for r, c in zip(rows, cols)}
        assert len(cells) == 1, (x, y, cells)
        patches.append(cells.pop())
    assert len(set(patches)) == 6


def test_expert_samples_are_deterministic_and_use_training_seeds_only() -> None:
    a = [s for _, s in zip(range(25), expert_samples(7, 10, 0.2, 32))]
    b = [s for _, s in zip(range(25), expert_samples(7, 10, 0.2, 32))]
    for x, y in zip(a, b):
        assert all(np.array_equal(i, j) for i, j in zip(x.images, y.images))
        assert np.array_equal(x.actions, y.actions) and np.array_equal(x.state, y.state) and x.texts == y.texts
    s = a[0]
    assert len(s.images) == len(CAMERA_NAMES) and s.images[0].shape == (32, 32, 3)
    assert s.state.shape == (STATE_DIM,) and s.actions.shape == (10, STATE_DIM)
    words = set(vocabulary())
    assert all(x.instruction in words and x.texts["language"] in words and x.texts["memory"] in words for x in a)
    # with what users vary: instructions as people type them, each naming an object; the texts from the
    # vocabulary (or, for an absent object, the listing of what is there); every sample asks a question
    v = [s for _, s in zip(range(40), expert_samples(7, 10, 0.2, 32, variations=True))]
    words, names = set(vocabulary(variations=True)), set(object_names())
    assert all(target_in(x.instruction) in names and x.texts["language"] in words for x in v)
    assert all(x.texts["memory"] in words or set(x.texts["memory"].split(", ")) <= names for x in v)
    assert all(x.question and x.texts["ask"] for x in v) and not any(x.question for x in a)
    assert len({x.instruction for x in v}) > 10
    seeds = [next(training_seeds(k)) for k in range(20)]
    assert min(seeds) >= TRAIN_SEED_BASE and len(set(seeds)) == 20
    c = [s for _, s in zip(range(5), expert_samples(8, 10, 0.2, 32))]
    assert not np.array_equal(a[0].state, c[0].state)


def test_noisy_demonstrations_leave_the_expert_path_and_still_succeed() -> None:
    seed = TRAIN_SEED_BASE + 42
    clean = list(episode_samples(seed, 10, 0.2, 16, noisy=False))
    noisy = list(episode_samples(seed, 10, 0.2, 16, noisy=True))
    n = min(len(clean), len(noisy))
    assert any(not np.allclose(c.state, d.state, atol=1e-3) for c, d in zip(clean[:n], noisy[:n]))
    assert noisy[-1].texts["language"].startswith("lift")  # recovered and lifted
    assert clean[-1].texts["language"].startswith("lift")


def test_instructions_name_their_object_or_none() -> None:
    spec = EpisodeSpec.with_instruction(3, "Please  pick up the RED cup, then rest")
    assert spec.target_name == "red cup"
    assert EpisodeSpec.with_instruction(3, "dance ☃").target_name is None
    assert EpisodeSpec.from_seed(3).target_name in [o.name for o in Scene.random(3).objects]
    with pytest.raises(ValueError, match="seeds"):
        eval_specs(999_999, 2)


def test_episode_runner_sequences_episodes_on_a_live_clock() -> None:
    from oxygen_ros.runtime.trajectory import trajectory_points
    from oxygen_ros.sim.dataset import JOINT_NAMES
    from oxygen_ros.sim.runner import EpisodeRunner

    specs = eval_specs(20, 2)
    runner = EpisodeRunner(specs, 0.2, time_limit_s=1.0, settle_s=0.5)
    t0 = 100.0
    assert [e.kind for e in runner.update(t0)] == ["start"]
    q0 = runner.episode.state.copy()
    hold = trajectory_points(np.tile(q0 + np.array([0.2, 0, 0, 0]), (5, 1)), JOINT_NAMES, 0.2)[0]
    runner.receive(hold, t0 + 0.2)  # still settling: dropped
    assert runner.dropped == 1
    runner.update(t0 + 0.6)
    # stamped with the node clock 0.1 s in the past: its first point (at +0.2 s) is 0.1 s ahead
    stamped = trajectory_points(np.tile(q0 + np.array([0.2, 0, 0, 0]), (5, 1)), JOINT_NAMES, 0.2, start_time_ns=int((t0 + 0.5) * 1e9))[0]
    runner.receive(stamped, t0 + 0.6)
    assert runner.episode.follower.setpoint(0.2)[0] == pytest.approx(q0[0] + 0.2)
    events = runner.update(t0 + 1.6)  # past the 1 s limit: the first ends, the second starts
    assert [e.kind for e in events] == ["end", "start"] and not events[0].success
    assert events[0].duration_s == pytest.approx(1.0) and events[1].spec == specs[1]
    runner.update(t0 + 3.2)
    assert runner.finished and runner.episode is None and (runner.ended, runner.succeeded) == (2, 0)


def test_the_table_stops_the_arm_and_the_follower_continues_from_there() -> None:
    """A trajectory that would push the fingertips through the table leaves them on the table top; moving up
    again starts from where the arm was stopped, with no jump."""
    spec = EpisodeSpec.from_seed(4)
    episode = SimEpisode(spec, 0.2)
    start = episode.scene.q.copy()
    below = inverse_kinematics(np.array([0.3, 0.0, 0.02]))
    assert below is not None
    deep = below.copy()
    deep[1] -= 0.5  # the shoulder far down: the fingertips would end ~15 cm under the table top
    assert fingertip(deep)[2] < -0.1
    down = np.stack([np.concatenate([deep, [start[3]]])] * 2)
    episode.deliver(trajectory_points(down, JOINT_NAMES, 1.5)[0])
    episode.advance(4.0)
    assert -1e-6 <= episode.scene.tip[2] < 0.01  # resting on the table, not under it
    rest = episode.scene.q.copy()
    up = np.stack([np.concatenate([below, [start[3]]])] * 2)
    episode.deliver(trajectory_points(up, JOINT_NAMES, 0.5)[0])
    episode.advance(4.02)  # one physics step: the joints move at most their velocity limit from the rest pose
    assert np.all(np.abs(episode.scene.q[:3] - rest[:3]) <= MAX_VELOCITY[:3] * 0.02 + 1e-9)
    episode.advance(6.0)
    np.testing.assert_allclose(episode.scene.q[:3], below, atol=1e-6)


def test_samples_show_their_scene_in_random_colours_with_matching_texts() -> None:
    """Colour randomization: per tick the objects are repainted by one permutation; the instruction and the
    texts name the new colours, the geometry (state, actions, where the object stands) is the scene's own."""
    from oxygen_ros.sim.dataset import tick_samples
    from oxygen_ros.sim.scene import COLOURS

    episode = SimEpisode(EpisodeSpec.from_seed(TRAIN_SEED_BASE + 5))
    actions = expert_chunk(episode.scene, episode.target, 10, 0.2)
    [same] = tick_samples(episode, actions, None, 64, 10, 0.2)
    assert same.instruction == episode.spec.instruction and same.texts["language"] == episode.subtask
    swap = np.arange(len(COLOURS))[::-1].copy()  # red <-> yellow, blue <-> green
    [other] = tick_samples(episode, actions, swap, 64, 10, 0.2)
    target = episode.scene.objects[episode.target]
    new_colour = COLOURS[int(swap[COLOURS.index(target.colour)])]
    assert other.instruction == episode.spec.instruction.replace(target.colour, new_colour)
    assert other.texts["language"] == episode.subtask.replace(target.colour, new_colour)
    assert other.texts["location"] == same.texts["location"]  # the same place
    assert np.array_equal(other.actions, actions) and np.array_equal(other.state, same.state)
    assert not np.array_equal(other.images[0], same.images[0])  # repainted
    assert [o.colour for o in episode.scene.objects] == [o.colour for o in SimEpisode(episode.spec).scene.objects]
    samples = list(itertools.islice(episode_samples(TRAIN_SEED_BASE + 5, 10, 0.2, 64, relabel=False), 12))
    assert len({s.instruction for s in samples}) > 1  # colours differ between the ticks of one episode


def test_each_tick_adds_one_sample_per_other_goal_with_its_own_expert_labels() -> None:
    """Goal alternatives: while nothing is held, a tick's own sample is followed by one per other object,
    sharing its image arrays and state, naming that object, with the expert's chunk towards it; once the
    target is held only the tick's own sample remains."""
    from oxygen_ros.sim.dataset import tick_samples

    spec = EpisodeSpec.from_seed(TRAIN_SEED_BASE + 11)
    episode = SimEpisode(spec, 0.2, stop_on_success=False)
    rng = np.random.default_rng(0)
    own = expert_chunk(episode.scene, episode.target, 10, 0.2)
    samples = tick_samples(episode, own, None, 32, 10, 0.2, rng, variations=True)
    scene = episode.scene
    n = len(scene.objects)
    assert len(samples) in (n, n + 1) and np.array_equal(samples[0].actions, own)
    assert target_in(samples[0].instruction) == spec.target_name
    for sample in samples[1:n]:
        named = [i for i, o in enumerate(scene.objects) if o.name == target_in(sample.instruction)]
        assert len(named) == 1 and named[0] != episode.target
        assert sample.texts["language"] == subtask_text(scene, named[0])
        assert np.array_equal(sample.actions, expert_chunk(scene, named[0], 10, 0.2))
        assert all(a is b for a, b in zip(sample.images, samples[0].images)) and np.array_equal(sample.state, samples[0].state)
    for sample in samples[n:]:  # an absent object named: stay where it is, and say so
        missing = target_in(sample.instruction)
        assert scene.find(missing) is None and sample.texts["language"] == f"no {missing} here"
        assert np.allclose(sample.actions, np.broadcast_to(episode.state, sample.actions.shape))
    assert len({s.instruction for s in samples}) == len(samples)
    while episode.scene.held is None:  # run the clean expert until it holds the target
        episode.deliver(trajectory_points(expert_chunk(episode.scene, episode.target, 10, 0.2), JOINT_NAMES, 0.2)[0])
        episode.advance(episode.time_s + 0.2)
    assert len(tick_samples(episode, own, None, 32, 10, 0.2, rng)) == 1


def test_detour_episodes_visit_another_object_first_and_are_labelled_with_the_named_one(monkeypatch) -> None:  # noqa: ANN001
    """With a detour the robot reaches above another object first, while the labels keep naming the target;
    then it heads for the target and the episode still succeeds."""
    from oxygen_ros.sim import dataset

    monkeypatch.setattr(dataset, "DETOUR_P", 1.0)
    seed = TRAIN_SEED_BASE + 11
    spec = EpisodeSpec.from_seed(seed)
    samples = list(episode_samples(seed, 10, 0.2, 64, noisy=False, recolour=False, relabel=False))
    scene = Scene.random(seed)
    target = scene.find(spec.target_name)
    tips = [fingertip(s.state) for s in samples]
    others = [o for i, o in enumerate(scene.objects) if i != target]
    nearest_other = min(min(np.hypot(*(t[:2] - o.position[:2])) for o in others) for t in tips)
    assert nearest_other < 0.03  # it went to another object first
    assert all(s.texts["language"].endswith(spec.target_name) for s in samples)  # labels name the target
    assert samples[-1].texts["language"] == f"lift the {spec.target_name}"  # and it picked the target up


def test_target_uvs_are_where_the_named_object_is_drawn_in_each_view() -> None:
    """Every sample's ``target_uvs`` (the grounding loss's labels) lie, per camera, at the centre of the pixels
    that change when the object its instruction names is removed from the scene (when it is wholly in view); the
    wrist camera sees the named object on the way down; a name of no object gives None for every camera."""
    from oxygen_ros.sim.dataset import CAMERA_NAMES, _goal_sample, tick_samples
    from oxygen_ros.sim.render import render

    episode = SimEpisode(EpisodeSpec.from_seed(TRAIN_SEED_BASE + 11), 0.2, stop_on_success=False)
    checked = {camera: 0 for camera in CAMERA_NAMES}
    while episode.scene.held is None and episode.time_s < 8.0:
        scene = episode.scene
        samples = tick_samples(episode, expert_chunk(scene, episode.target, 10, 0.2), None, 64, 10, 0.2,
                               np.random.default_rng(0))  # fmt: skip
        assert len(samples) >= len(scene.objects) >= 2
        for view, camera in enumerate(CAMERA_NAMES):
            full = render(scene, camera, 64).astype(int)
            for sample in samples:
                if sample.target_uvs[view] is None:
                    continue
                [named] = [i for i, o in enumerate(scene.objects) if o.name == target_in(sample.instruction)]
                without = scene.copy()
                without.objects = [o for i, o in enumerate(without.objects) if i != named]
                rows, cols = np.nonzero(np.abs(render(without, camera, 64).astype(int) - full).sum(axis=2))
                if rows.min() == 0 or cols.min() == 0 or rows.max() == 63 or cols.max() == 63:
                    continue  # partly out of view: its drawn pixels are not centred on it
                u, v = sample.target_uvs[view]
                centroid = np.array([cols.mean() + 0.5, rows.mean() + 0.5]) / 64
                assert np.abs(centroid - (u, v)).max() < 0.05, (camera, episode.time_s, centroid, (u, v))
                checked[camera] += 1
        episode.deliver(trajectory_points(expert_chunk(scene, episode.target, 10, 0.2), JOINT_NAMES, 0.2)[0])
        episode.advance(episode.time_s + 0.4)
    assert checked["base"] > 10 and checked["wrist"] > 3
    scene = episode.scene
    nothing = _goal_sample(scene, samples[0].images, None, "pick up the purple cup", episode.state, samples[0].actions)
    assert nothing.target_uvs == (None, None)


def test_text_uvs_point_where_the_texts_objects_are() -> None:
    """Each sample's ``text_uvs`` (the pointing loss's labels): the memory note's second read is where its
    neighbour appears (the object its note ends with), the question's reads where the object it is about and
    the object its answer names appear in the base camera, each as that object's ``target_uvs`` would be
    there (the wrist camera, moving with the arm, is never a text's read); a look that finds no object (an
    absent object's, nothing beside it) is None; the gripper's question reads none; a sample naming an absent
    object has no memory reads."""
    from oxygen_ros.sim.dataset import episode_samples
    from oxygen_ros.sim.questions import PHRASINGS

    def uvs_of(sample, name: str):  # noqa: ANN001, ANN202
        base = next(((u, v) for u, v, n in sample.object_uvs[0] if n == name), None)
        return (base, None)

    counted = {"memory": 0, "about": 0, "answer": 0, "absent": 0, "no object": 0, "held": 0}
    for sample in itertools.islice(episode_samples(TRAIN_SEED_BASE + 7, 10, 0.2, 64, variations=True), 80):
        reads = sample.text_uvs
        if target_in(sample.instruction) is None or sample.texts["memory"].count(",") or "memory" not in reads:
            assert "memory" not in reads
            counted["absent"] += 1
        else:
            first, second = reads["memory"]
            assert first == () and second == uvs_of(sample, sample.texts["memory"].split(" the ")[-1])
            counted["memory"] += 1
        if not reads["ask"]:
            assert sample.question in PHRASINGS["train"]["held"]
            counted["held"] += 1
            continue
        about, named = reads["ask"]
        for uvs in (about, named):
            assert uvs is None or uvs == () or (len(uvs) == 2 and uvs[1] is None)
        if about is None:
            assert sample.texts["ask"] == "not here" and named is None
        if named is None:
            assert sample.texts["ask"] in ("not here", "nothing")
            counted["no object"] += 1
        if about:
            counted["about"] += 1
            assert any(uv is not None for uv in about)
        if named and sample.texts["ask"] not in ("nothing", "not here") and " " in sample.texts["ask"]:
            if sample.texts["ask"].split()[0] not in ("near", "far"):
                assert named == uvs_of(sample, sample.texts["ask"])
                counted["answer"] += 1
    assert min(counted.values()) > 0, counted


def test_object_uvs_list_every_object_in_view_where_the_grounding_labels_put_it() -> None:
    """Each sample's ``object_uvs`` (the recognition loss's labels) name, per camera, every object whose centre
    is in view, at the point its ``target_uvs`` give when it is the named one (checked against the drawn pixels
    above); the goal alternatives of a tick share them; the painted colours are the ones named."""
    from oxygen_ros.sim.dataset import CAMERA_NAMES, episode_samples

    named_seen = 0
    for sample in itertools.islice(episode_samples(TRAIN_SEED_BASE + 5, 10, 0.2, 64, variations=True), 60):
        assert len(sample.object_uvs) == len(CAMERA_NAMES)
        for view, seen in enumerate(sample.object_uvs):
            names = [name for _, _, name in seen]
            assert len(names) == len(set(names)) and all(0 <= u < 1 and 0 <= v < 1 for u, v, _ in seen)
            target = target_in(sample.instruction)
            if sample.target_uvs[view] is not None:
                [(u, v)] = [(u, v) for u, v, name in seen if name == target]
                assert (u, v) == pytest.approx(sample.target_uvs[view])
                named_seen += 1
        assert len(sample.object_uvs[0]) >= 2  # the base camera sees the whole table
    assert named_seen > 60
