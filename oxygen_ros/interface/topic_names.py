"""ROS 2 topic name rules, checked without rclpy.

The rules are those rcl applies to a topic name before expanding it (ROS 2 design article "Topic and
Service names"): not empty; only ASCII letters, digits, '_', '/', a leading '~' and balanced '{}'
substitutions; no token and no substitution starting with a digit; no trailing '/'; a leading '~' is
followed by '/'. test_topic_names.py checks the verdicts against rclpy's own validation.
"""

from __future__ import annotations

__all__ = ["robot_name_problem", "robot_topic", "topic_name_problem"]

_ROBOT_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def topic_name_problem(name: str) -> str | None:
    """None for a valid topic name, else the reason and the position of the offending character."""
    if not name:
        return "topic name must not be empty"
    if name[0].isdigit() and name[0].isascii():
        return "topic name token must not start with a number (position 0)"
    if name.endswith("/"):
        return f"topic name must not end with a forward slash (position {len(name) - 1})"
    brace = -1  # index of the open '{', -1 outside a substitution
    for i, ch in enumerate(name):
        if ch in _WORD:
            if ch.isdigit() and brace >= 0 and i == brace + 1:
                return f"substitution name must not start with a number (position {i})"
        elif ch == "~":
            if i != 0:
                return f"topic name must not have '~' unless it is the first character (position {i})"
        elif ch == "{":
            if brace >= 0:
                return f"substitution name must hold only letters, digits and '_' (position {i})"
            brace = i
        elif ch == "}":
            if brace < 0:
                return f"topic name must not have unmatched curly braces (position {i})"
            brace = -1
        elif ch == "/" and brace < 0:
            continue
        elif brace >= 0:
            return f"substitution name must hold only letters, digits and '_' (position {i})"
        else:
            return f"topic name must hold only letters, digits, '_', '/', a leading '~' and '{{}}' (position {i})"
    if brace >= 0:
        return f"topic name must not have unmatched curly braces (position {brace})"
    for i in range(len(name) - 1):
        if name[i] == "/" and name[i + 1] in "0123456789":
            return f"topic name token must not start with a number (position {i + 1})"
    if name.startswith("~") and len(name) > 2 and name[1] != "/":  # as rcl: a two-character "~x" passes
        return "topic name must not have a '~' that is not followed by a forward slash (position 1)"
    return None


def robot_name_problem(name: str) -> str | None:
    """None when ``name`` can be a robot's namespace token (letters, digits, '_'; not starting with a digit)."""
    if not name or not set(name) <= _ROBOT_NAME_CHARS or name[0].isdigit():
        return f"robot name {name!r} must be one namespace token: letters, digits and '_', not starting with a digit"
    return None


def robot_topic(robot: str, topic: str, node_name: str) -> str:
    """The name a node serving several robots uses for ``robot``'s ``topic``: what a one-robot node started in
    the namespace ``<its namespace>/<robot>`` would resolve, written relative to the node's own namespace.

    ``camera/image`` → ``arm1/camera/image``; ``~/ask`` → ``arm1/<node_name>/ask``. ``robot == ""`` (the node's
    only robot) keeps the name as it is. Absolute names cannot follow a robot: ValueError.
    """
    if not robot:
        return topic
    if topic.startswith("/"):
        raise ValueError(f"{topic!r} is absolute: with several robots every topic must be relative (or private, '~/...') "
                         "so that it resolves under each robot's namespace")
    if topic.startswith("~"):
        rest = topic[1:].lstrip("/")
        return f"{robot}/{node_name}/{rest}" if rest else f"{robot}/{node_name}"
    return f"{robot}/{topic}"
