"""rtc: compile a YAML recipe card into one standalone, readable Tinker training loop.

The compiler is a straight pipeline (see `rtc.build.compile_card`):
load the card with positions -> validate (JSON Schema + cross-field rules) -> resolve defaults
from the catalog -> render the Jinja templates -> check the output -> write atomically.

Nothing here imports torch, transformers or tinker: `rtc` must start fast.
"""

__version__ = "0.1.0"
