"""sweeper: find the fastest safe deployment configuration for an LLM inference server by measuring it.
The packages' layers are in docs/architecture.md; the modules shared by every layer sit here:

- errors.py     error kinds: a UserError is one line and an exit code, anything else a bug
- interrupts.py Ctrl-C, SIGTERM and SIGHUP as KeyboardInterrupt, never inside a storage call
- levels.py     a load level's identity and its names (a concurrency or an open-loop rate)
- outcomes.py   the shared vocabulary: Stage, FailureKind, a level's metrics, metric names
- redact.py     secrets never reach results or logs
"""

__version__ = "0.1.0"
