# Stand-in for PyGithub: importable only (the Buildkite launcher's tests do not use it).
class Auth:
    class Token:
        def __init__(self, *a, **k): pass
class Github:
    def __init__(self, *a, **k): raise RuntimeError("PyGithub stand-in")
class UnknownObjectException(Exception): pass
class GithubException(Exception): pass
from . import Branch, Commit, GithubObject, Tag, Workflow, WorkflowRun  # noqa: E402,F401
