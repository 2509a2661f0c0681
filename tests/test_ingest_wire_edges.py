"""Edges of the agent's wire format (greenops/telemetry/wire.py), each answer worked out by hand
from the format: written for the surviving mutants of `python tests/mutation/run.py wire`
(issue 16; tests/mutation/SURVIVORS.md, section "wire"). Pure: no database, no HTTP."""
