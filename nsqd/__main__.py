"""``python -m nsqd``."""

from .cli import main

main()
