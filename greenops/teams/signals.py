"""Signals the teams app sends so that apps above it (which own data keyed by a team's hosts)
can act without teams importing them."""

from django.dispatch import Signal

# Sent by membership.delete_team inside its transaction, before the team row is deleted, with
# `team=`. A receiver deletes what does not cascade from the team row and returns the number of
# raw samples it deleted (greenops.telemetry.models connects one for samples and rollups).
team_deleting = Signal()
