"""pytest plugin for scripts/kernelbot-check.sh: skips, saying why, the Kernelbot tests that
need its PostgreSQL (the docker_compose, database and bot fixtures of tests/conftest.py start
it with docker compose and images this machine cannot pull). Every other test runs."""

import pytest

DB_FIXTURES = {"docker_compose", "database", "bot"}


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs Kernelbot's PostgreSQL (docker compose); not run by kernelbot-check.sh")
    for item in items:
        if DB_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(skip)
