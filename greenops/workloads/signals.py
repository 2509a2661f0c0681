"""Signals the workloads app sends so that apps above it can act without workloads importing
them."""

from django.dispatch import Signal

# Sent by jobs.stop_job once a job has stopped, with `job=`: greenops.kpis.job_accounting
# computes its energy, carbon and cost before stop_job returns.
job_stopped = Signal()
