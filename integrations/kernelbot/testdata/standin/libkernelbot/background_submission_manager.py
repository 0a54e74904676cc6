# Stand-in for Kernelbot's src/libkernelbot/background_submission_manager.py at
# 4bdd839a: only the API path's hard timeout, which the launcher's budgets stay under.
HARD_TIMEOUT_SEC = 60 * 30  # hard timeout 30 mins
