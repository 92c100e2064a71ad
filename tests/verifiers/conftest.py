"""Load the task verifiers by file path.

templates/verifiers/*.py are data that the compiler inlines into generated loops, not an installed
package, so the tests import each file directly under a private module name.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
VERIFIERS_DIR = REPO_ROOT / "templates" / "verifiers"


def load_verifier(name: str):
    """Import templates/verifiers/<name>.py once and return the module."""
    module_name = f"_rtc_verifier_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, VERIFIERS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def verifier_module():
    """load_verifier as a fixture: test modules do not import conftest (another conftest.py may shadow it)."""
    return load_verifier


@pytest.fixture(scope="session")
def math_verify():
    return load_verifier("math").verify


@pytest.fixture(scope="session")
def code_verify():
    return load_verifier("code").verify


@pytest.fixture(scope="session")
def json_verify():
    return load_verifier("json_fields").verify


@pytest.fixture(scope="session")
def match_verify():
    return load_verifier("match").verify
