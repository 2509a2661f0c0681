"""Plain helpers shared by tests: factories, fakes, fixed figures, subprocess drivers.

Rule of the layout (tests/README.md): a test module (test_*.py) never imports another test
module. What several test modules share is either a fixture, in the conftest.py of the nearest
folder above all its users, or a plain function/class/constant, here in tests/support/.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
DATA = ROOT / "tests" / "data"  # real-format inputs (dcgm-exporter, Triton, vLLM pages)
