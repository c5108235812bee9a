"""How each camera's header stamps sit against the joint states', measured on a recording (no ROS).

The node aligns a chunk to its observation's camera stamp, so a camera stamped late or early against the joint
states (another clock, a driver that stamps on publication, a fixed delay) shifts every judged command in
time and shows only as larger errors. Each message's stamp is compared with the time it was recorded (its
receipt): the median of (stamp − recorded) of a camera minus that of the joint states is the camera's stamp
offset against the joint states (negative: the camera's stamps are behind); each topic's median of
(recorded − stamp) is its receive lag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .eval_defaults import DEFAULT_WARN_S  # noqa: F401 - re-exported



def stamp_offsets(samples: Mapping[str, Sequence[int]], cameras: Sequence[str], joint_topics: Sequence[str],
                  warn_s: float) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """``samples``: per topic, each message's stamp − recorded time (ns). Returns the summary's
    ``input_timing`` and a warning per camera whose offset is above ``warn_s``."""
    lag = {t: float(np.median(v)) / 1e9 for t, v in samples.items() if len(v)}
    joints = [lag[t] for t in joint_topics if t in lag]
    reference = float(np.median(joints)) if joints else None
    out: dict[str, Any] = {"warn_above_s": warn_s, "joint_states": {t: _topic(samples[t]) for t in joint_topics if t in lag},
                           "cameras": {}}  # fmt: skip
    warnings = []
    for cam in cameras:
        if cam not in lag:
            continue
        row = _topic(samples[cam])
        if reference is not None:
            offset = lag[cam] - reference
            row["offset_to_joint_states_s"] = round(offset, 4)
            if abs(offset) > warn_s:
                side = "behind" if offset < 0 else "ahead of"
                warnings.append(f"camera {cam}'s stamps are {abs(offset):.3f} s {side} the joint states' (against "
                                f"their recorded times; receive lag {row['receive_lag_s']:.3f} s against "
                                f"{-reference:.3f} s): chunks are aligned to the camera stamp, so every judged command "
                                "is shifted by as much; check the camera's clock or stamping")  # fmt: skip
        out["cameras"][cam] = row
    return out, warnings


def _topic(values: Sequence[int]) -> dict[str, Any]:
    """A topic's receive lag (median recorded − stamp) and its spread (the 5th to 95th percentile)."""
    lags = -np.asarray(values, dtype=np.float64) / 1e9
    p5, p50, p95 = np.percentile(lags, [5, 50, 95])
    return {"messages": len(lags), "receive_lag_s": round(float(p50), 4), "receive_lag_p5_p95_s": [round(float(p5), 4), round(float(p95), 4)]}
