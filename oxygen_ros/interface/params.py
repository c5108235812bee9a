"""The node's declared parameters: one table, shared by the node and the offline tools.

Every `RuntimeConfig` field is a parameter of the same name; the text tasks are four flat lists
(`task_names`, `task_prompts`, `task_every_n_frames`, `task_max_tokens`) because a ROS parameter
cannot hold a list of mappings. Parameters that fix the model or the wiring (topics) are read-only once
the node runs; the rest (rates, ages, output switches, limits, the default instruction) can be changed
with `ros2 param set`, and a bad value is refused with a reason. Validation and the mapping to the
node's settings live in `settings`; declaring the parameters on an rclpy node in
`oxygen_ros.ros.node_params`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

from oxygen_ros.embodiment import ADAPTERS
from oxygen_ros.engine.mode_names import MODES
from oxygen_ros.model.network.choices import ACTION_BACKENDS, DTYPE_CHOICES, PACK_CHOICES, PREFILL_BACKENDS, SCHEDULES
from oxygen_ros.engine.questions import ASK_TASK
from oxygen_ros.model.network.config import PRESETS
from oxygen_ros.model.checkpoints.key_maps import VARIANTS
from oxygen_ros.runtime import RuntimeConfig
from oxygen_ros.runtime.alignment import REPLAN, TIME_ALIGNMENTS
from oxygen_ros.runtime.config import NORM_MODE_CHOICES, PROMPT_FORMAT_CHOICES, RESIZE_MODE_CHOICES

from .param_spec import ParamSpec, check_device as _check_device, check_topic as _check_topic
from .topic_names import robot_name_problem

__all__ = ["DEFAULT_TRAJECTORY_TOPIC", "PARAMS", "RUNTIME_FIELDS", "SPECS", "TASK_LISTS"]

DEFAULT_TRAJECTORY_TOPIC = "joint_trajectory_controller/joint_trajectory"  # relative: follows the namespace
_TASK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def _check_task_names(value: Sequence[str]) -> str | None:
    bad = [n for n in value if not _TASK_NAME.match(n)]
    if bad:
        return f"task_names {bad} must start with a letter and hold only letters, digits and '_' (they become topic names)"
    if len(set(value)) != len(value):
        return f"task_names must be unique, got {list(value)}"
    if ASK_TASK in value:
        return f"task_names: {ASK_TASK!r} is reserved for the ~/ask action's answers"
    return None


def _check_robot_names(value: Sequence[str]) -> str | None:
    problems = [r for name in value if (r := robot_name_problem(name))]
    if problems:
        return f"robots: {problems[0]}"
    if len(set(value)) != len(value):
        return f"robots must be unique, got {list(value)}"
    return None


def _runtime_default(name: str) -> Any:
    return getattr(RuntimeConfig(), name)


def _task_default(field: str) -> list[Any]:
    return [getattr(t, field) for t in RuntimeConfig().tasks]


PARAMS: tuple[ParamSpec, ...] = (
    # ----------------------------------------------------------------- model (RuntimeConfig fields)
    ParamSpec("model_preset", "str", _runtime_default("model_preset"),
              "Built-in model shape used when 'checkpoint' is empty (random weights: for demos and tests).",
              choices=tuple(sorted(PRESETS))),
    ParamSpec("checkpoint", "str", "", "Checkpoint folder (model.safetensors + config.json); '' = use model_preset."),
    ParamSpec("tokenizer", "str", "",
              "PaliGemma tokenizer: SentencePiece .model file or Hugging Face folder (tokenizer.json); '' = the "
              "built-in demo tokenizer (random-weight presets only)."),
    ParamSpec("norm_stats", "str", "",
              "norm_stats.json (openpi format); '' = the checkpoint's own statistics (openpi assets/, LeRobot "
              "processor files). A checkpoint without any refuses to start unless norm_mode is none."),
    ParamSpec("norm_mode", "str", _runtime_default("norm_mode"),
              "How states/actions are normalized: auto = as the checkpoint's framework (LeRobot: its norm map; openpi: "
              "quantile; a preset: none), quantile, mean_std, or none (the model's normalized values go out as they are).",
              choices=NORM_MODE_CHOICES),
    ParamSpec("device", "str", _runtime_default("device"), "Torch device: cpu, cuda or cuda:N.", check=_check_device),
    ParamSpec("dtype", "str", _runtime_default("dtype"),
              "Model weights dtype: float32, bfloat16 (half the memory), or auto = bfloat16 on CUDA and on a CPU with "
              "AVX512-BF16/AMX, float32 on other CPUs (where bfloat16 runs slower); the node logs which and why.",
              choices=DTYPE_CHOICES),
    ParamSpec("horizon", "int", _runtime_default("horizon"),
              "Action chunk length H: 0 = the checkpoint's own (openpi action_horizon, LeRobot chunk_size); another "
              "value than the checkpoint's is refused. Sets H of a preset.", low=0, high=1000),
    ParamSpec("denoise_steps", "int", _runtime_default("denoise_steps"),
              "Flow-matching Euler steps per chunk; 0 = the checkpoint's (LeRobot num_inference_steps, else 10).",
              low=0, high=1000),
    ParamSpec("prompt_format", "str", _runtime_default("prompt_format"),
              "Prompt layout; auto = what the checkpoint records (LeRobot: pi05_state), else pi05_state with a "
              "warning; 'pi05_state' puts the digitized joint state in the prompt (needs joint_names).",
              choices=PROMPT_FORMAT_CHOICES),
    ParamSpec("resize_mode", "str", _runtime_default("resize_mode"),
              "Camera image resize: auto = as the checkpoint's framework; pil = openpi (PIL bilinear on uint8); "
              "bilinear = LeRobot (torch bilinear on float, no antialiasing).", choices=RESIZE_MODE_CHOICES),
    ParamSpec("delta_action_mask", "bool[]", [],
              "Per action dimension: true = trained relative to the state (the state is added back after "
              "unnormalizing; openpi ALOHA: 6 x true, false, 6 x true, false). Empty = the checkpoint's (LeRobot "
              "use_relative_actions), else absolute."),
    ParamSpec("embodiment", "str", _runtime_default("embodiment"),
              "Robot-side transforms of the checkpoint's framework (docs/checkpoints.md, robots): none, droid (8 dims: joint "
              "velocities + binarized gripper, clipped to [-1, 1]), aloha (14 dims, adapt_to_pi), libero (7 EEF dims), "
              "scale_offset (unit_scale/unit_offset), or auto (from the openpi asset id).",
              choices=("auto", *ADAPTERS)),
    ParamSpec("adapt_to_pi", "bool", True,
              "embodiment aloha: openpi's joint flip mask and gripper conversions on state and actions (its default)."),
    ParamSpec("unit_scale", "float[]", [],
              "embodiment scale_offset: per dimension, model units = robot units x scale + offset (state; the "
              "inverse on actions), e.g. 57.2958 for radians on the robot and degrees in the dataset."),
    ParamSpec("unit_offset", "float[]", [], "embodiment scale_offset: per dimension offset; empty = zeros."),
    ParamSpec("paligemma_variant", "str", "",
              "Backbone shape of an openpi training checkpoint without config.json ('' = from config.json).",
              choices=("", *sorted(VARIANTS))),
    ParamSpec("action_expert_variant", "str", "",
              "Action expert shape of an openpi training checkpoint without config.json ('' = from config.json).",
              choices=("", *sorted(VARIANTS))),
    ParamSpec("action_dim", "int", 0,
              "Model action width of an openpi training checkpoint without config.json (0 = from config.json).",
              low=0, high=4096),
    ParamSpec("task_names", "str[]", _task_default("name"),
              "Text tasks decoded from every frame's shared prefix; each publishes on ~/text/<name>.",
              check=_check_task_names),
    ParamSpec("task_prompts", "str[]", _task_default("prompt"), "Continuation prompt of each task (same order)."),
    ParamSpec("task_every_n_frames", "int[]", _task_default("every_n_frames"),
              "Each task starts a new request every N control ticks.", low=1, high=1_000_000),
    ParamSpec("task_stop", "str[]", [], "Optional stop string of each task ('' = none); empty = no stop strings."),
    ParamSpec("task_max_tokens", "int[]", _task_default("max_tokens"), "Token limit of each task's requests.",
              low=1, high=100_000),
    ParamSpec("engine_mode", "str", _runtime_default("engine_mode"),
              "Scheduling: 'oxygen' (shared prefill + cross-frame batched text) or a comparison baseline.",
              choices=tuple(MODES)),
    ParamSpec("tokens_per_frame", "int", _runtime_default("tokens_per_frame"),
              "oxygen mode: 0 = decode as many tokens as fit before the next tick; k > 0 = k steps per tick.",
              low=0, high=100_000),
    ParamSpec("kv_budget_mb", "float", float(_runtime_default("kv_budget_mb")), "KV cache memory budget in MiB.",
              low=0.0, high=1e7, low_open=True),
    ParamSpec("admission", "str", _runtime_default("admission"),
              "When the KV budget is full: 'wait' queues new text requests, 'refuse' drops them.",
              choices=("wait", "refuse")),
    ParamSpec("max_waiting", "int", _runtime_default("max_waiting"), "Most text requests queued for KV memory.",
              low=0, high=100_000),
    ParamSpec("seed", "int", _runtime_default("seed"), "Seed of the action noise (and of preset weights).",
              low=0, high=2**31 - 1),
    ParamSpec("num_threads", "int", _runtime_default("num_threads"),
              "Torch CPU threads for the model (0 = torch's default, one per core).", low=0, high=1024),
    ParamSpec("action_backend", "str", _runtime_default("action_backend"),
              "'compiled': the action chunk through torch.compile, compiled at start-up (eager if that fails); "
              "'cuda_graph': replayed from one CUDA graph of the compiled network (CUDA only); 'auto': cuda_graph "
              "on CUDA, compiled on a CPU; 'eager': plain torch.", choices=ACTION_BACKENDS),
    ParamSpec("prefill_backend", "str", _runtime_default("prefill_backend"),
              "'compiled': the prefill (vision tower and backbone) through torch.compile, compiled at start-up "
              "(eager if that fails); 'auto': compiled on a CPU, eager on CUDA (faster there, measured); "
              "'eager': plain torch.", choices=PREFILL_BACKENDS),
    ParamSpec("overlap_decode", "bool", _runtime_default("overlap_decode"),
              "oxygen mode: run one batched decode step on a second thread while the action chunk runs."),
    ParamSpec("pack_decode_weights", "str", _runtime_default("pack_decode_weights"),
              "CPU, bfloat16: decode steps multiply by a second copy of the backbone and text-head weights packed "
              "for oneDNN (same tokens, faster steps): 'auto' where the copy fits 1 GiB, 'on' whatever it takes, "
              "'off' never (saves that memory).", choices=tuple(PACK_CHOICES)),
    # ------------------------------------------------------- chunk execution (runtime/alignment.py, chunking.py)
    ParamSpec("n_action_steps", "int", _runtime_default("n_action_steps"),
              "Execution horizon: actions of a chunk run after it arrives before the next one replaces it "
              "(0 = the checkpoint's n_action_steps, else the whole chunk); at most horizon.", low=0, high=1000),
    ParamSpec("replan", "str", _runtime_default("replan"),
              "When a new chunk is computed: every control tick, or once n_action_steps steps ran since the last.",
              choices=REPLAN),
    ParamSpec("time_alignment", "str", _runtime_default("time_alignment"),
              "'stamp': trajectories stamped with the observation time (the controller skips past points); "
              "'drop': the first ceil(latency / step) actions dropped, the rest start on arrival; 'none': every "
              "action from arrival (replays the past).", choices=TIME_ALIGNMENTS),
    ParamSpec("rtc", "bool", _runtime_default("rtc"),
              "Real-time chunking: guide each chunk's overlap with the still-executing previous chunk."),
    ParamSpec("rtc_beta", "float", _runtime_default("rtc_beta"),
              "Real-time chunking: maximum guidance weight (0 = plain sampling).", low=0.0, high=1e6),
    ParamSpec("rtc_prefix_attention_horizon", "int", _runtime_default("rtc_prefix_attention_horizon"),
              "Real-time chunking: rows of the new chunk guided at all (0 = the whole overlap); at most horizon.",
              low=0, high=1000),
    ParamSpec("rtc_schedule", "str", _runtime_default("rtc_schedule"),
              "Real-time chunking: prefix weights from the delay to the horizon.", choices=SCHEDULES),
    # ----------------------------------------------------------------------------- inputs (topics)
    ParamSpec("camera_topics", "str[]", ["camera/image_raw"],
              "One topic per image slot, in slot order (pi0.5: base, left wrist, right wrist); '' = no camera "
              "(masked slot). Slots past the end of the list are masked.",
              check=_check_topic("camera_topics", allow_empty=True)),
    ParamSpec("camera_features", "str[]", [],
              "Per camera_topics entry: the checkpoint image feature it feeds (LeRobot input_features name, e.g. "
              "observation.images.top or top; openpi base_0_rgb, left_wrist_0_rgb, right_wrist_0_rgb). Empty = "
              "camera_topics are in slot order. Slots no topic names are masked."),
    ParamSpec("camera_compressed", "bool[]", [],
              "Per slot: true = sensor_msgs/CompressedImage. Empty = a topic ending in '/compressed' is compressed."),
    ParamSpec("camera_optional", "bool[]", [],
              "Per slot: true = a missing/stale/bad image masks the slot; false (default) = no chunk without it."),
    ParamSpec("camera_widths", "int[]", [], "Per slot expected image width in pixels (0 = any); empty = any.",
              low=0, high=100_000),
    ParamSpec("camera_heights", "int[]", [], "Per slot expected image height in pixels (0 = any); empty = any.",
              low=0, high=100_000),
    ParamSpec("joint_state_topic", "str", "joint_states", "sensor_msgs/JointState topic.",
              check=_check_topic("joint_state_topic")),
    ParamSpec("joint_state_topics", "str[]", [],
              "Several sensor_msgs/JointState topics read together (e.g. one per arm: /puppet_left/joint_states, "
              "/puppet_right/joint_states); empty = joint_state_topic alone.",
              check=_check_topic("joint_state_topics")),
    ParamSpec("joint_state_prefixes", "str[]", [],
              "Per joint_state_topics entry, a prefix put before every joint name that topic reports (e.g. left_, "
              "right_ for two arms that publish the same names); a joint_names entry comes from the topic whose prefix "
              "it starts with. Empty = the names as reported."),
    ParamSpec("joint_conversions", "str[]", [],
              "Per joint_names entry, the conversion of its joint state into the model's units (as output_conversions: "
              "the same relation, read from the robot's side; e.g. aloha_gripper_position). Empty = as reported."),
    ParamSpec("joint_names", "str[]", [],
              "Joints read from joint_states (the state, in this order) and commanded by the trajectory (the first "
              "len(joint_names) action dimensions). Empty = no state and no trajectory."),
    ParamSpec("instruction_topic", "str", "~/instruction",
              "std_msgs/String instruction topic (reliable; volatile, or transient local: latched, a node started "
              "later still gets it).",
              check=_check_topic("instruction_topic")),
    ParamSpec("default_instruction", "str", "", "Instruction used until one arrives on instruction_topic.",
              read_only=False),
    ParamSpec("max_instruction_chars", "int", 2000, "Longer instructions are refused.", read_only=False,
              low=1, high=1_000_000),
    ParamSpec("episode_topic", "str", "", "A simulator's episode reports (std_msgs/String JSON, oxygen_sim_node's "
              "~/episode): as each episode starts, the action noise is seeded by its seed and the text schedule starts "
              "over, as oxygen-sim eval does, so the same seeds give the same chunks; empty = none (a real robot).",
              check=_check_topic("episode_topic", allow_empty=True)),
    # ------------------------------------------------------------------------------------- timing
    ParamSpec("control_rate_hz", "float", 5.0, "Control ticks (action chunks) per second.", read_only=False,
              low=0.0, high=1000.0, low_open=True),
    ParamSpec("action_step_period_s", "float", 0.0,
              "Time between consecutive actions of a chunk; 0 = one control period.", read_only=False,
              low=0.0, high=60.0),
    ParamSpec("max_observation_age_s", "float", 0.5,
              "Inputs older than this (node clock minus header stamp) are stale: no chunk from them.",
              read_only=False, low=0.0, high=3600.0, low_open=True),
    # ------------------------------------------------------------------------------------ outputs
    ParamSpec("publish_trajectory", "bool", True,
              "Publish the controller outputs (the JointTrajectory of joint_names, or output_types); false = ActionChunk only.",
              read_only=False),
    ParamSpec("trajectory_topic", "str", DEFAULT_TRAJECTORY_TOPIC, "JointTrajectory topic of the controller.",
              check=_check_topic("trajectory_topic")),
    # One entry per output (ROS parameters cannot hold lists of mappings); empty output_types = the single
    # JointTrajectory above. See oxygen_ros/runtime/outputs.py and docs/wiring.md (Outputs: one controller each).
    ParamSpec("output_types", "str[]", [],
              "One per output: joint_trajectory (JTC), float64_array (forward_command_controller), joint_group / "
              "joint_single (the Interbotix X-series driver's JointGroupCommand / JointSingleCommand) or twist (MoveIt "
              "Servo). Empty = one JointTrajectory of joint_names on trajectory_topic."),
    ParamSpec("output_names", "str[]", [], "One name per output (logs, diagnostics)."),
    ParamSpec("output_topics", "str[]", [], "One command topic per output, e.g. left_arm_controller/joint_trajectory."),
    ParamSpec("output_dims", "str[]", [],
              "The action dims of each output, in order: '0..5', '6', '0,2'. Every action dim goes to exactly one output."),
    ParamSpec("output_joints", "str[]", [],
              "Comma-separated joint names per output (joint_trajectory: one per dim); '' for a twist."),
    ParamSpec("output_interfaces", "str[]", [],
              "position or velocity per output (joint_trajectory points, float64_array: a velocity output sends "
              "zeros when its chunk ends), or position_step (float64_array: each command is the joints' measured "
              "positions plus the values, a target one step ahead); empty = position."),
    ParamSpec("output_groups", "str[]", [],
              "Per output: joint_group: the driver's joint group (e.g. arm); joint_single: the driver's joint (e.g. "
              "gripper); '' for the others; empty = none."),
    ParamSpec("output_scale_together", "str[]", [],
              "Per output '' or one bound per dim in the controller's units ('4x 2.175; 3x 2.61'): after the "
              "conversions, values beyond a bound scale the whole command down together so the largest is at its "
              "bound (the direction kept, as DROID scales a joint velocity); empty = none."),
    ParamSpec("output_frames", "str[]", [], "twist outputs: header.frame_id (e.g. the end effector's link)."),
    ParamSpec("output_scales", "float[]", [], "twist outputs: every component times this; empty = 1."),
    ParamSpec("output_binarize", "str[]", [],
              "Per output '' or 'threshold,below,above': values above threshold become above, the rest below (a gripper)."),
    ParamSpec("output_conversions", "str[]", [],
              "Per output, one conversion per dim from the model's units to the controller's, ';'-separated: identity, "
              "linear(scale, offset), a named converter (aloha_gripper_joint, lerobot_degrees(min, max, zero_tick), ...), "
              "'Nx ' to repeat, ' clip(lo, hi)' to bound the model value (oxygen_ros/embodiment/conversions.py). "
              "Empty = values sent as they are."),
    ParamSpec("reset_pose", "float[]", [],
              "The pose the policy wants its arms in before an episode: one arm's joint positions in the robot's units "
              "(openpi's ALOHA policies send [0, -1.5, 1.5, 0, 0, 0] in their metadata), offered on ~/reset_pose "
              "(sensor_msgs/JointState, latched) for every arm output of as many joints. Empty = none."),
    ParamSpec("publish_text", "bool", True, "Publish the text streams (~/text/<task> and ~/text/<task>/final).",
              read_only=False),
    ParamSpec("joint_limits_lower", "float[]", [],
              "Lower position limit per joint_names entry (trajectory points are clamped); empty = no clamping.",
              read_only=False),
    ParamSpec("joint_limits_upper", "float[]", [], "Upper position limit per joint_names entry; empty = no clamping.",
              read_only=False),
    # ------------------------------------------------------------------ safety (oxygen_ros/runtime/safety)
    ParamSpec("limit_joints", "str[]", [],
              "Joints the limits below name, by the outputs' joint names (output_joints), in the controller's units "
              "(after output_conversions). Empty = no joint limits (the node warns once at start)."),
    ParamSpec("limit_max_velocity", "float[]", [],
              "Per limit_joints entry: the fastest it may be commanded, units/s (trajectories re-timed, streamed "
              "steps and velocities shortened along their direction); 0 = none.", read_only=False, low=0.0),
    ParamSpec("limit_max_distance", "float[]", [],
              "Per limit_joints entry: the farthest a position command may lie from the measured position when it "
              "is due, units; 0 = none (grippers that squeeze objects: none).", read_only=False, low=0.0),
    ParamSpec("limit_lower", "float[]", [],
              "Per limit_joints entry: lower position limit (commands clamped); equal lower and upper = none.",
              read_only=False),
    ParamSpec("limit_upper", "float[]", [], "Per limit_joints entry: upper position limit.", read_only=False),
    ParamSpec("limit_out_of_range_margin", "float", 0.5,
              "A position beyond its limit by more than this share of the joint's range is no command: hold.",
              read_only=False, low=0.0, high=100.0),
    ParamSpec("output_max_acceleration", "float[]", [],
              "Per output: the largest change of a velocity or twist command, units/s^2, where the controller has no "
              "limit of its own; 0 or empty = none.", read_only=False, low=0.0),
    ParamSpec("output_max_linear_speed", "float[]", [],
              "Per output (twist): the largest norm of the linear part, in the twist's units; 0 or empty = none.",
              read_only=False, low=0.0),
    ParamSpec("output_max_angular_speed", "float[]", [],
              "Per output (twist): the largest norm of the angular part; 0 or empty = none.", read_only=False, low=0.0),
    ParamSpec("hold_timeout_s", "float", 0.0,
              "Hold every output when no chunk was commanded for this long (a model that stalls); 0 = the chunk's "
              "execution (n_action_steps steps) plus two control periods.", read_only=False, low=0.0, high=3600.0),
    ParamSpec("resume_blend_s", "float", 0.5,
              "After a hold, an activation or a stop: commands blend from the measured position over this long.",
              read_only=False, low=0.0, high=60.0),
    ParamSpec("stop_topic", "str", "~/stop",
              "Latched std_msgs/Bool (transient local): true stops every command (the model and its text go on) "
              "until false; the std_srvs/SetBool service ~/set_stop does the same.", check=_check_topic("stop_topic")),
    ParamSpec("diagnostics_period_s", "float", 1.0, "Period of the /diagnostics report.", low=0.01, high=3600.0),
    # --------------------------------------------------------------------------- ~/ask (Ask action)
    ParamSpec("ask_max_tokens", "int", 48, "Longest answer of the ~/ask action (a goal's max_tokens 0 = this).",
              low=1, high=100_000),
    ParamSpec("ask_max_goals", "int", 4, "Most ~/ask goals open at once (more are refused); 0 = refuse every question.",
              low=0, high=32),
    # ------------------------------------------------------------------------------ several robots
    ParamSpec("robots", "str[]", [],
              "Names of the robots this node serves from one model; each robot's topics, outputs and ~/ask resolve "
              "under its namespace (<node namespace>/<robot>/...). Empty = one robot, topics as given.",
              check=_check_robot_names),
    ParamSpec("robot_control_rates_hz", "float[]", [],
              "One control rate per robots entry, in Hz (each robot's chunks and their step period follow its own "
              "rate; the control timer runs at the fastest). Empty = every robot at control_rate_hz.",
              read_only=False, low=0.0, high=1000.0, low_open=True),
)

SPECS: dict[str, ParamSpec] = {p.name: p for p in PARAMS}
RUNTIME_FIELDS = tuple(f.name for f in dataclasses.fields(RuntimeConfig) if f.name != "tasks")
TASK_LISTS = ("task_names", "task_prompts", "task_every_n_frames", "task_max_tokens")
