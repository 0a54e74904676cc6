from typing import Optional as Opt  # noqa: F401
NotSet = None
