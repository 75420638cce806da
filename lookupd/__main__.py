"""``python -m lookupd``."""

from .cli import main

main()
