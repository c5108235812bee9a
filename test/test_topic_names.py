"""The rclpy-free topic name check gives rclpy's verdict on valid and invalid names."""

from __future__ import annotations

import random

import pytest
from rclpy.exceptions import InvalidTopicNameException
from rclpy.validate_topic_name import validate_topic_name

from oxygen_ros.interface.topic_names import topic_name_problem

NAMES = [
    "", "/", "a", "~", "~/", "~/a", "~a", "~ab", "~/a/b", "/a/b", "a/b", "a/", "a//b", "/a//b", "7a", "a/7b", "a7/b",
    "_a", "/_a", "a b", "a-b", "a.b", "{ns}/a", "/{ns}/a", "a/{ns}", "{7ns}/a", "{ns", "ns}", "{n/s}", "{{ns}}",
    "{}", "{~}", "a~", "a/~/b", "camera/image_raw", "/cam0", "joint_trajectory_controller/joint_trajectory",
    "é", "/a/é", "~/text/language", "{a}{b}", "/a/{b}c",
]


def _rclpy_accepts(name: str) -> bool:
    try:
        validate_topic_name(name)
    except InvalidTopicNameException:
        return False
    return True


@pytest.mark.parametrize("name", NAMES)
def test_same_verdict_as_rclpy(name: str) -> None:
    problem = topic_name_problem(name)
    assert (problem is None) == _rclpy_accepts(name), (name, problem)


def test_same_verdict_as_rclpy_on_random_names() -> None:
    rng = random.Random(0)
    alphabet = "ab7_/~{}. "
    for _ in range(3000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        assert (topic_name_problem(name) is None) == _rclpy_accepts(name), name


def test_a_refusal_says_where() -> None:
    assert "position 2" in topic_name_problem("/a b")
