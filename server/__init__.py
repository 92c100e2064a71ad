"""rtc serve: a local Tinker-compatible training server on the CPU.

Importing this package is cheap on purpose: torch, transformers and FastAPI are imported by
the modules that need them, when the server starts.
"""
