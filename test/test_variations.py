"""What a user varies in the simulator: instruction phrasings, lighting, distractors, absent objects, the
object count, and how the eval reports them (success per family, absent objects apart from the targets)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from oxygen_ros.engine import ASK_TASK
from oxygen_ros.sim.cli import build_parser, varied_specs
from oxygen_ros.sim.episode import EVAL_FAMILIES, EpisodeSpec, SimEpisode
from oxygen_ros.sim.evaluate import EpisodeResult, EvalSettings, TextRecord, summarize
from oxygen_ros.sim.phrasing import FAMILIES, POLITE, VERBS, made_up_word, phrase, target_in, with_filler
from oxygen_ros.model.tokenizers.tokenizer import Tokenizer
from oxygen_ros.sim.questions import ANSWER_MAX_TOKENS, NOTHING, NOT_HERE, Question, all_answers, answer, objects_read
from oxygen_ros.sim.scene import Scene
from oxygen_ros.sim.variation import Lighting, absent_name, add_distractor, adjust

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("split", ["train", "held_out"])
def test_every_family_names_the_object_as_typed(split: str) -> None:
    rng = np.random.default_rng(0)
    for family in FAMILIES:
        texts = {phrase("yellow block", family, rng, split) for _ in range(40)}
        assert all(target_in(t) == "yellow block" for t in texts), (family, texts)
    assert all(t.isupper() for t in {phrase("red cup", "upper", rng) for _ in range(5)})
    assert all(t[0] == "P" or t[0] == "G" for t in {phrase("red cup", "capitalized", rng) for _ in range(9)})
    assert all(t.endswith(".") for t in {phrase("red cup", "full_stop", rng) for _ in range(9)})
    assert {target_in(t) for t in ("Please pick up the RED MUG!", "get me the green  cube.", "a blue sphere?")} == {
        "red cup", "green block", "blue ball"}
    assert target_in("dance") is None and target_in("the purple cup") is None


def test_held_out_words_are_not_in_the_training_split() -> None:
    assert set(VERBS["train"]) < set(VERBS["held_out"]) and set(POLITE["train"]) < set(POLITE["held_out"])
    rng = np.random.default_rng(1)
    held = {phrase("red cup", "verb_synonym", rng, "held_out") for _ in range(200)}
    train = {phrase("red cup", "verb_synonym", rng, "train") for _ in range(200)}
    assert held - train and not train - held


def test_a_filler_word_is_one_made_up_word_that_never_splits_the_name() -> None:
    rng = np.random.default_rng(2)
    words = [made_up_word(rng) for _ in range(300)]
    assert all(w.isalpha() and w.islower() and 2 <= len(w) <= 8 for w in words) and len(set(words)) > 250
    at_start = 0
    for _ in range(300):
        said = phrase("blue cup", "typed", rng)
        filled = with_filler(said, rng)
        assert target_in(filled) == "blue cup", filled  # the colour still stands right before the kind
        added = [w for w in filled.split() if w not in said.split()]
        assert len(filled.split()) == len(said.split()) + 1 and len(added) == 1, (said, filled)
        at_start += filled.split()[0] == added[0]
    assert 0 < at_start < 300  # anywhere a word may go, the start included


def test_families_vary_one_thing_and_plain_is_the_seed_episode() -> None:
    for seed in range(10_000, 10_020):
        base = EpisodeSpec.from_seed(seed)
        assert EpisodeSpec.for_family(seed, "plain") == base
        for family in EVAL_FAMILIES:
            spec = EpisodeSpec.for_family(seed, family)
            assert spec.seed == seed and spec.family == family
            episode = SimEpisode(spec)
            if family == "absent":
                assert episode.absent and episode.subtask == f"no {spec.target_name} here"
                assert set(episode.memory.split(", ")) == {o.name for o in episode.scene.objects}
            else:
                assert spec.target_name == base.target_name and episode.scene.find(base.target_name) is not None
            if family in ("same_colour", "same_kind"):
                assert len(episode.scene.objects) == len(Scene.random(seed).objects) + 1
                extra = episode.scene.objects[-1]
                colour, kind = base.target_name.split()
                assert (extra.colour == colour) != (extra.kind == kind)
                assert len({o.name for o in episode.scene.objects}) == len(episode.scene.objects)


def test_lighting_scales_brightness_and_contrast_per_camera() -> None:
    image = np.random.default_rng(0).integers(60, 190, (32, 32, 3)).astype(np.uint8)
    brighter, flatter = adjust(image, 1.2, 1.0), adjust(image, 1.0, 0.5)
    assert brighter.mean() == pytest.approx(image.mean() * 1.2, rel=0.01)
    assert flatter.std() == pytest.approx(image.std() * 0.5, rel=0.02)
    assert flatter.mean() == pytest.approx(image.mean(), abs=0.5)
    base, wrist = Lighting((1.0, 1.2), (1.0, 1.0)).apply((image, image))
    assert np.array_equal(base, image) and np.array_equal(wrist, brighter)
    drawn = Lighting.random(np.random.default_rng(3))
    assert all(0.8 <= v <= 1.2 for v in (*drawn.brightness, *drawn.contrast))
    with pytest.raises(ValueError):
        adjust(image, -1.0, 1.0)


def test_distractors_absent_names_and_object_counts() -> None:
    rng = np.random.default_rng(0)
    for seed in range(30):
        scene = Scene.random(seed, 4)
        name = scene.objects[0].name
        kind = name.split()[1]
        crowded = sum(o.kind == kind for o in scene.objects) == 4  # every colour of that kind is there already
        assert (add_distractor(scene, name, "same_kind", rng) is None) == crowded
        assert scene.find(absent_name(scene, rng)) is None
    with pytest.raises(ValueError, match="1 to 4"):
        Scene.random(0, 6)
    parser = build_parser()
    args = parser.parse_args(["eval", "--num-objects", "7"])
    with pytest.raises(ValueError, match="num_objects 7"):
        varied_specs(args)


def test_questions_have_true_answers() -> None:
    scene = Scene.random(10_004, 4)
    left_most = max(scene.objects, key=lambda o: o.position[1])
    assert answer(scene, Question("left", "", left_most.name)) == NOTHING
    assert answer(scene, Question("held", "", None)) == NOTHING
    assert answer(scene, Question("where", "", "purple cup")) == NOT_HERE
    assert answer(scene, Question("where", "", left_most.name)).endswith("left")


def test_a_question_reads_the_object_it_is_about_then_the_one_its_answer_names() -> None:
    """The pointing loss's targets: "where" reads its object twice (its place is the answer), "left of" and
    "right of" the object, then the one the answer names (no object, None, for "nothing"); an absent object's
    looks find no object; the gripper's question reads none."""
    kinds = {"object": 0, "nothing": 0}
    for seed in range(10_000, 10_030):
        scene = Scene.random(seed, 4)
        for o in scene.objects:
            assert objects_read(scene, Question("where", "", o.name)) == (scene.find(o.name),) * 2
            for side in ("left", "right"):
                question = Question(side, "", o.name)
                about, named = objects_read(scene, question)
                assert about == scene.find(o.name)
                truth = answer(scene, question)
                assert (named is None) == (truth == NOTHING)
                assert named is None or scene.objects[named].name == truth
                kinds["nothing" if named is None else "object"] += 1
        assert objects_read(scene, Question("held", "", None)) == ()
        assert objects_read(scene, Question("left", "", absent_name(scene, np.random.default_rng(seed)))) == (None, None)
    assert min(kinds.values()) > 50


def test_every_true_answer_fits_the_answer_budget_of_the_eval_and_the_demo() -> None:
    """A budget below the longest answer cuts true answers ("near ri") and counts them wrong."""
    tokenizer = Tokenizer.from_file(str(REPO / "models" / "demo" / "tokenizer.model"))
    longest = max(len(tokenizer.encode(" " + a)) for a in all_answers())
    assert longest + 1 <= ANSWER_MAX_TOKENS  # and room for the end of the text


def test_the_eval_command_line_builds_the_varied_episodes() -> None:
    parser = build_parser()
    specs = varied_specs(parser.parse_args(["eval", "--episodes", "3", "--seed", "10000", "--family", "all"]))
    assert len(specs) == 3 * len(EVAL_FAMILIES) and {s.family for s in specs} == set(EVAL_FAMILIES)
    specs = varied_specs(parser.parse_args(["eval", "--episodes", "2", "--brightness", "1.1", "0.9", "--contrast", "1.2",
                                            "--distractor", "same_colour"]))  # fmt: skip
    assert all(s.lighting == Lighting((1.1, 0.9), (1.2, 1.2)) and s.distractor == "same_colour" for s in specs)
    with pytest.raises(ValueError):
        varied_specs(parser.parse_args(["eval", "--brightness", "1", "2", "3"]))


def _result(spec: EpisodeSpec, success: bool, absent: bool, narrated: bool) -> EpisodeResult:
    label = spec.target_name or ""
    texts = [TextRecord("language", label if narrated else "wrong", label, 0)]
    return EpisodeResult(spec, success, 1.0 if success and not absent else None, 2.0, 3, 0, texts, absent=absent,
                         place=None if absent else "far left")  # fmt: skip


def test_summary_reports_each_family_and_keeps_absent_objects_out_of_the_targets() -> None:
    plain = EpisodeSpec.from_seed(10_000)
    upper = EpisodeSpec.for_family(10_000, "upper")
    absent = EpisodeSpec.for_family(10_000, "absent")
    results = [_result(plain, True, False, True), _result(upper, False, False, True), _result(absent, True, True, False)]
    runtime = SimpleNamespace(config=SimpleNamespace(engine_mode="oxygen", tokens_per_frame=4))
    summary = summarize(results, runtime, EvalSettings())
    assert summary["success_by_family"]["plain"]["success"] == [1, 1]
    assert summary["success_by_family"]["upper"] == {"success": [0, 1], "success_rate": 0.0, "narration_accuracy": 1.0,
                                                     "memory_accuracy": None, "answer_accuracy": None}  # fmt: skip
    assert summary["success_by_target"] == {plain.target_name: [1, 2]}  # the absent name is not a target here
    assert summary["absent"] == {"episodes": 1, "nothing_lifted": 1}


def test_summary_splits_the_answers_by_their_kind() -> None:
    """A policy that always says "nothing" scores on the questions whose answer is nothing, and the split shows it."""
    spec = EpisodeSpec.from_seed(10_000)
    truths = ["nothing", "far left", "red cup", "not here", "nothing", "near centre"]
    result = _result(spec, True, False, True)
    result.texts += [TextRecord(ASK_TASK, " nothing", truth, 0) for truth in truths]
    runtime = SimpleNamespace(config=SimpleNamespace(engine_mode="oxygen", tokens_per_frame=4))
    summary = summarize([result], runtime, EvalSettings(questions=2))
    assert summary["answers_by_kind"] == {"not here": [0, 1], "nothing": [2, 2], "object": [0, 1], "place": [0, 2]}
    assert summary["answer_accuracy"] == pytest.approx(2 / 6)
    assert "answers_by_kind" not in summarize([result], runtime, EvalSettings())


def test_the_gif_captions_an_answer_only_once_the_policy_answered() -> None:
    from oxygen_ros.sim.media import AnswerOut, EpisodeLog, episode_frames

    log = EpisodeLog(0, "pick up the red cup", 0, end_ns=10**9)
    log.frames = [(k * 10**8, np.zeros((64, 64, 3), np.uint8)) for k in (1, 2, 3)]
    answer = AnswerOut("what is in the gripper?", "red cup", source_ns=10**8, final_ns=2 * 10**8, truth="nothing")
    log.answers = [answer]
    before, at, after = (np.asarray(f)[-40:] for f in episode_frames(log)[:3])  # the answer's caption rows
    assert not np.array_equal(before, at) and np.array_equal(at, after)
    assert answer.mark == "✗" and answer.verdict == "[wrong; true: nothing]"
    assert answer.caption() == 'Q: what is in the gripper?   A: "red cup"   [wrong; true: nothing]'  # the verdict apart
    place = AnswerOut("where is the cube?", "on the table, back right", 1, 2, "on the table, back right")
    # a place's "right" is a direction: the verdict says "correct", in brackets, so the two never read alike
    assert place.caption() == 'Q: where is the cube?   A: "on the table, back right"   [correct]'


def test_the_summary_counts_the_subtask_in_force_before_a_restated_start() -> None:
    from oxygen_ros.sim.media import EpisodeLog, subtask_spans

    s = 10**9
    # the first label came 3 s before the start was restated (the policy was still loading); then two changes
    log = EpisodeLog(0, "pick up the red cup", 10 * s, end_ns=14 * s)
    log.labels = [(7 * s, "move to the red cup", None), (12 * s, "grasp the red cup", None), (13 * s, "lift the red cup", None)]
    assert subtask_spans(log) == [(-1.0, 2.0, "move"), (2.0, 3.0, "grasp"), (3.0, 4.0, "lift")]
    log.labels = log.labels[1:]  # nothing known before the first change: nothing drawn before it
    assert subtask_spans(log) == [(2.0, 3.0, "grasp"), (3.0, 4.0, "lift")]
