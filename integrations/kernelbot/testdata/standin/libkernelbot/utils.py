# Stand-in for Kernelbot's src/libkernelbot/utils.py setup_logging.
import logging


def setup_logging(name=None):
    return logging.getLogger(name)
