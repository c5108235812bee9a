"""ROS 2 topic name rules, checked without rclpy.

The rules are those rcl applies to a topic name before expanding it (ROS 2 design article "Topic and
Service names"): not empty; only ASCII letters, digits, '_', '/', a leading '~' and balanced '{}'
substitutions; no token and no substitution starting with a digit; no trailing '/'; a leading '~' is
followed by '/'. test_topic_names.py checks the verdicts against rclpy's own validation.
"""

from __future__ import annotations

__all__ = ["topic_name_problem"]

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
