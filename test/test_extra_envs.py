"""The extra environments scripts/setup.sh makes (scripts/extra_envs.py): ready only with a matching stamp, a venv
without a stamp kept when it passes its probe, a build script run into the venv, and a test that needs a missing one
skipped saying how to make it. Real venvs (made without pip: no package index is reachable from the tests)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from extra_env import extra_envs, extra_python
from openpi_client_env import CLIENT_VERSIONS


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "oxygen_ros"


def _bare_venv(env) -> None:  # noqa: ANN001 (an ExtraEnv)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(extra_envs.folder(env))], check=True, timeout=120)


def test_a_venv_that_passes_its_probe_is_kept_then_ready_until_its_spec_changes(cache: Path) -> None:
    env = extra_envs.ExtraEnv(name="probe-only", folder="probe-only", requirements=(), probe="import json",
                              used_by="this test")  # fmt: skip
    assert "missing" in extra_envs.problem(env) and "run bash scripts/setup.sh" in extra_envs.problem(env)
    _bare_venv(env)
    assert "missing" in extra_envs.problem(env)  # no stamp yet: not known to be complete
    assert extra_envs.make(env) == "kept"
    assert extra_envs.problem(env) is None and extra_envs.make(env) == "ready"
    assert extra_envs.folder(env) == cache / "probe-only"
    changed = extra_envs.ExtraEnv(name="probe-only", folder="probe-only", requirements=("numpy==1.26.4",),
                                  probe="import json", used_by="this test")  # fmt: skip
    assert "out of date" in extra_envs.problem(changed)
    probe_changed = dataclasses.replace(env, probe="import json, os")
    assert extra_envs.make(probe_changed) == "made" and extra_envs.problem(probe_changed) is None  # stale: remade


def test_a_build_script_runs_into_the_venv_and_a_changed_script_remakes_it(cache: Path, tmp_path: Path) -> None:
    script = tmp_path / "build.sh"
    script.write_text('echo one > "$1/built.txt"\n')
    env = extra_envs.ExtraEnv(name="built", folder="built", requirements=(), used_by="this test", build=str(script),
                              probe="import pathlib, sys; sys.exit(not (pathlib.Path(sys.prefix) / 'built.txt').exists())")
    assert extra_envs.make(env) == "made" and extra_envs.problem(env) is None
    assert (extra_envs.folder(env) / "built.txt").read_text() == "one\n"
    script.write_text('echo two > "$1/built.txt"\n')
    assert "out of date" in extra_envs.problem(env)
    assert extra_envs.make(env) == "made" and (extra_envs.folder(env) / "built.txt").read_text() == "two\n"
    script.write_text("exit 3\n")
    with pytest.raises(RuntimeError, match="could not make built"):
        extra_envs.make(env)
    assert "missing" in extra_envs.problem(env)  # a failed build leaves no stamp that says ready


def test_an_environment_for_sources_not_here_is_not_made() -> None:
    env = extra_envs.ExtraEnv(name="src", folder="src", requirements=(), probe="", used_by="this test",
                              only_if="no/such/sources")  # fmt: skip
    assert not env.applies() and extra_envs.find("openpi-client-0.1.2").applies()


def test_a_pinned_version_not_installed_is_not_kept(cache: Path) -> None:
    env = extra_envs.ExtraEnv(name="pinned", folder="pinned", requirements=("openpi-client==0.1.2",),
                              probe="import json", used_by="this test")  # fmt: skip
    _bare_venv(env)
    assert not extra_envs.usable(env)


def test_a_missing_environment_skips_the_test_saying_how_to_make_it(cache: Path) -> None:
    with pytest.raises(pytest.skip.Exception, match=r"openpi-client-0\.1\.2 environment is missing .*run bash scripts/setup\.sh"):
        extra_python("openpi-client-0.1.2")


def test_setup_makes_every_client_version_the_tests_use() -> None:
    made = {e.name for e in extra_envs.ENVS if e.on_setup and e.applies()}
    assert {f"openpi-client-{v}" for v in CLIENT_VERSIONS} <= made


def test_unknown_name_is_refused_with_the_known_ones(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        extra_envs.main(["make", "no-such-env"])
    assert exit_info.value.code == 2 and "known: openpi-client-0.1.1" in capsys.readouterr().err


def test_an_environment_made_with_another_python_version(cache: Path) -> None:
    """A venv made with the Python it names (pyenv's or PATH's); a machine without that version skips with a
    reason test/allowed_skips.txt allows, and making it fails saying so (not as a failed install)."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = extra_envs.ExtraEnv(name="versioned", folder="versioned", requirements=(), used_by="this test",
                              probe=f"import sys; sys.exit(sys.version_info[:2] != ({here.replace('.', ', ')}))",
                              python=here)  # fmt: skip
    assert extra_envs.find_python(here) is not None
    assert extra_envs.make(env) == "made" and extra_envs.problem(env) is None
    missing = dataclasses.replace(env, name="old", folder="old", python="2.1")
    assert extra_envs.find_python("2.1") is None
    assert extra_envs.problem(missing).startswith(extra_envs.NO_PYTHON)
    allowed = extra_envs_allowed()
    assert any(extra_envs.problem(missing).startswith(prefix) for prefix in allowed)
    with pytest.raises(RuntimeError, match="this machine has no Python 2.1"):
        extra_envs.make(missing)


def extra_envs_allowed() -> list[str]:
    from script_loader import load_script

    check_skips = load_script("check_skips")
    return check_skips.allowed_prefixes(check_skips.ALLOWED)
