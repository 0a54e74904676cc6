"""The patch's edits to Kernelbot's own files, checked in the patched checkout (run by
scripts/kernelbot-check.sh with the checkout's src/ on PYTHONPATH): env.py's settings, the
registration in main.py, the admin commands' GPU list, the report's Buildkite link. main.py and
admin_cog.py import discord and uvicorn, which kernelbot-check's Python may lack, so those two are
read as source (ast) rather than imported; the rest runs Kernelbot's code."""

import ast
import datetime
import importlib
import inspect
from pathlib import Path

import pytest

import libkernelbot
from libkernelbot.consts import BuildkiteGPU, GitHubGPU, ModalGPU
from libkernelbot.report import Link, generate_report
from libkernelbot.run_eval import EvalResult, FullResult, ProfileResult, RunResult, SystemInfo

SRC = Path(inspect.getfile(libkernelbot)).parent.parent


def function(path: Path, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise AssertionError(f"{path} has no function {name}")


def test_env_reads_the_kbgen_settings(monkeypatch):
    monkeypatch.setenv("KBGEN_SERVER", "unix:/run/kbgen/serve.sock")
    monkeypatch.setenv("KBGEN_SERVER_TOKEN", "t0k")
    monkeypatch.setenv("KBGEN_QUEUE_TIMEOUT", "300")
    import kernelbot.env as env_module

    env = importlib.reload(env_module).env
    assert (env.KBGEN_SERVER, env.KBGEN_SERVER_TOKEN, env.KBGEN_QUEUE_TIMEOUT) == (
        "unix:/run/kbgen/serve.sock",
        "t0k",
        "300",
    )


def test_main_always_registers_the_buildkite_launcher():
    backend = function(SRC / "kernelbot" / "main.py", "create_backend")
    calls = [
        stmt.value
        for stmt in backend.body  # top level of the function: not under an if
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
    ]
    launchers = [c.args[0] for c in calls if c.args and isinstance(c.args[0], ast.Call)]
    buildkite = [c for c in launchers if getattr(c.func, "id", "") == "BuildkiteLauncher"]
    assert len(buildkite) == 1, ast.unparse(backend)
    keywords = {k.arg: ast.unparse(k.value) for k in buildkite[0].keywords}
    assert keywords == {
        "url": "env.KBGEN_SERVER",
        "token": "env.KBGEN_SERVER_TOKEN",
        "queue_timeout": "env.KBGEN_QUEUE_TIMEOUT",
    }


def test_admin_commands_list_every_gpu():
    node = function(SRC / "kernelbot" / "cogs" / "admin_cog.py", "admin_gpu_names")
    scope = {"GitHubGPU": GitHubGPU, "ModalGPU": ModalGPU, "BuildkiteGPU": BuildkiteGPU}
    exec(compile(ast.Module([node], []), "admin_cog.py", "exec"), scope)  # noqa: S102
    names = scope["admin_gpu_names"]()
    assert set(names) == {g.name for g in (*GitHubGPU, *ModalGPU, *BuildkiteGPU)}
    assert len(names) > 25  # why create-local autocompletes instead of a choice list
    source = (SRC / "kernelbot" / "cogs" / "admin_cog.py").read_text(encoding="utf-8")
    assert "app_commands.choices(" not in source


def profile_result(url: str) -> FullResult:
    run = RunResult(
        success=True,
        passed=True,
        command="ncu ./eval.out",
        stdout="",
        stderr="",
        exit_code=0,
        duration=1.0,
        result={"benchmark-count": "1", "benchmark.0.spec": "k=1", "benchmark.0.report": ""},
    )
    start = datetime.datetime(2026, 1, 1)
    profile = ProfileResult(profiler="ncu", trace="", download_url=url)
    runs = {
        "profile.0": EvalResult(start=start, end=start, compilation=None, run=run, profile=profile)
    }
    return FullResult(success=True, error="", system=SystemInfo(), runs=runs)


@pytest.mark.parametrize(
    "url, label",
    [
        ("https://buildkite.com/gpu-mode/kernelbot/builds/7", "Open the build on Buildkite"),
        ("https://github.com/gpu-mode/runners/actions/runs/1/artifacts/2", "Download from GitHub"),
    ],
)
def test_profile_link_label(url, label):
    links = [d for d in generate_report(profile_result(url)).data if isinstance(d, Link)]
    assert [(link.text, link.url) for link in links] == [(label, url)]
