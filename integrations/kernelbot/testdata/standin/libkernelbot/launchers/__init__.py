# Stand-in for Kernelbot's src/libkernelbot/launchers/__init__.py with the
# patch applied (the GitHub and Modal launchers need packages CI lacks).
from .buildkite import BuildkiteLauncher
from .launcher import Launcher, RunnerQueueStatus

__all__ = [Launcher, RunnerQueueStatus, BuildkiteLauncher]
