# Stand-in for Kernelbot's src/libkernelbot/utils.py at 4bdd839a: setup_logging
# and KernelBotError, as there.
import logging


def setup_logging(name=None):
    return logging.getLogger(name)


class KernelBotError(Exception):
    def __init__(self, message, code: int = 400):
        super().__init__(message)
        self.http_code = code
