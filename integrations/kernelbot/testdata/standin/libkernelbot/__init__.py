# Stand-in for Kernelbot's libkernelbot package (github.com/gpu-mode/kernelbot,
# src/libkernelbot/), just enough to import and test launchers/buildkite.py in
# kbgen's CI, which has no Kernelbot checkout. scripts/kernelbot-check.sh runs
# the same launcher inside the real Kernelbot.
