# Stand-in for psycopg2: importable only; every connection fails.
from . import errors, extensions  # noqa: F401


class Error(Exception):
    pass


def connect(*args, **kwargs):
    raise Error("psycopg2 stand-in: no database")
