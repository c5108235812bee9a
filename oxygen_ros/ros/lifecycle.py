"""`OxygenLifecycleNode`: the policy node as a managed (lifecycle) node.

    ros2 lifecycle set /oxygen_node configure    # validate parameters, load model/tokenizer/stats, warm up
    ros2 lifecycle set /oxygen_node activate     # subscriptions, control timer, model thread live
    ros2 lifecycle set /oxygen_node deactivate   # stop ticking; live text ends with final deltas, KV freed
    ros2 lifecycle set /oxygen_node cleanup      # release the model and every publisher

A configure that fails (bad parameters, a checkpoint that does not load) returns FAILURE: the node stays
unconfigured and alive, logs the reason and reports it in /diagnostics ("oxygen_ros: node", ERROR); fix the
parameters (those fixed at start-up are writable while unconfigured) and configure again. Publishers are
lifecycle publishers: they publish only while active. `autostart` (see main.py) configures and activates
at start, like nav2's lifecycle manager and llama_ros do.
"""

from __future__ import annotations

from typing import Any

from rclpy.lifecycle import LifecycleNodeMixin, LifecycleState, TransitionCallbackReturn
from rclpy.publisher import Publisher
from rclpy.qos import QoSProfile

from oxygen_ros.runtime import RuntimeLoadError

from .node import OxygenNode, RuntimeLoader
from oxygen_ros.interface.param_spec import ConfigError

__all__ = ["OxygenLifecycleNode"]

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


class OxygenLifecycleNode(LifecycleNodeMixin, OxygenNode):
    def __init__(self, node_name: str = "oxygen_node", *, runtime_loader: RuntimeLoader | None = None, **kwargs: Any) -> None:
        OxygenNode.__init__(self, node_name, runtime_loader=runtime_loader, managed=True, **kwargs)
        LifecycleNodeMixin.__init__(self)

    @property
    def state_label(self) -> str:
        return self._state_machine.current_state[1]

    def _make_publisher(self, msg_type: Any, topic: str, qos: QoSProfile) -> Publisher:
        return self.create_lifecycle_publisher(msg_type, topic, qos)

    def _destroy_publisher(self, publisher: Publisher) -> None:
        self.destroy_lifecycle_publisher(publisher)  # type: ignore[arg-type]

    # ------------------------------------------------------------------------------ transitions
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._configure()
        except (ConfigError, RuntimeLoadError) as exc:
            return self._failed("configure", exc)
        except Exception as exc:  # anything else a loader raises: still a failed transition, not a dead node
            return self._failed("configure", exc, unexpected=True)
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_activate(state)  # activates the lifecycle publishers first
        if result == SUCCESS:
            self._activate()
            self.get_logger().info("active")
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        ended = self._deactivate()  # while the publishers are still active: the final deltas go out
        self.get_logger().info(f"inactive ({ended} text requests ended)")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._cleanup()
        self.get_logger().info("unconfigured: model released")
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self.active:
            self._deactivate()
            super().on_deactivate(state)
        if self.runtime is not None:
            self._cleanup()
            self.get_logger().info("finalized: model released")
        return super().on_shutdown(state)

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        # A transition raised: release what is held and go back to unconfigured.
        self.get_logger().error(f"error while leaving {state.label}: releasing everything")
        try:
            if self.runtime is not None:
                self._cleanup()
        except Exception as exc:
            self.get_logger().error(f"cleanup after the error failed: {type(exc).__name__}: {exc}")
            return FAILURE
        return SUCCESS

    def _failed(self, transition: str, exc: BaseException, unexpected: bool = False) -> TransitionCallbackReturn:
        kind = f"{type(exc).__name__}: " if unexpected else ""
        self.state_problem = f"{transition} failed: {kind}{exc}"
        self.get_logger().error(self.state_problem)
        self._on_diagnostics()  # report the reason at once, not at the next period
        return FAILURE

    def finish(self, timeout_s: float = 1.0) -> int:
        """Shutdown for the console script: deactivate (final deltas out), release everything."""
        self._diag_timer.cancel()
        ended = self._deactivate(timeout_s) if self.active else 0
        if self.state_label in ("unconfigured", "inactive", "active"):
            self.trigger_shutdown()
        return ended
