"""docs/architecture.md's diagrams are what scripts/draw_architecture.py draws from the code now: the layers from
the import-linter contracts and the package's real imports, one tick from the calls a real tick makes (the tiny
random-weight model, no rclpy). A diagram that no longer matches fails here with the command that redraws it."""

from __future__ import annotations

from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
REDRAW = ".venv/bin/python scripts/draw_architecture.py"


def test_the_committed_diagrams_are_what_the_code_draws_now() -> None:
    draw = load_script("draw_architecture")
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawn = draw.diagrams()
    assert {"layers", "tick"} <= set(drawn)
    stale = [name for name, body in drawn.items() if draw.committed(text, name) != body]
    assert stale == [], f"docs/architecture.md: {stale} no longer match the code; run `{REDRAW}` and commit the doc"
    assert "0 pointing up a layer, 0 between siblings" in drawn["layers"]
    tick = drawn["tick"]
    for call in ("engine.Engine.tick", "Pi05Model.prefill", "Pi05Model.sample_actions", "Pi05Model.extend"):
        assert call in tick, call  # the tick's own steps are in the picture


def test_an_upward_import_is_drawn_as_one_and_counted(tmp_path: Path) -> None:
    draw = load_script("draw_architecture")
    pkg = tmp_path / "oxygen_ros"
    for name, source in {"top": "from oxygen_ros.bottom import x\n", "bottom": "from ..top import y\nimport rclpy\n"}.items():
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text(source, encoding="utf-8")
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "loose.py").write_text("from oxygen_ros import top\n", encoding="utf-8")
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\nroot_package = oxygen_ros\n\n[importlinter:contract:layers]\nname = two\ntype = layers\n"
        "containers = oxygen_ros\nlayers =\n    top\n    bottom\n", encoding="utf-8")  # fmt: skip
    (contract,) = draw.layers_contracts(tmp_path / ".importlinter")
    assert contract.layers == (("top",), ("bottom",))
    chart = draw.render_layers(contract, tmp_path)
    assert "top --> bottom" in chart and "bottom -. UP .-> top" in chart
    assert 'bottom["bottom/<br/>rclpy"]' in chart  # where DDS is imported
    assert 'subgraph OUT["outside the contract"]' in chart and "loose --> top" in chart
    assert "1 pointing up a layer" in draw.layers_summary(contract, tmp_path)
