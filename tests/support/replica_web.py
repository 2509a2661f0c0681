"""The WSGI application tests/system/test_replica.py serves (through greenops.webserver's
Granian): greenops.wsgi's, with its Celery tasks routed to the test's own worker, whose queue
the test names in GREENOPS_TEST_TASK_QUEUE (the worker consumes "<queue>.<group>" queues)."""

import os

from greenops.wsgi import application  # noqa: F401 (what the server serves)
from tests.support.celery_worker import routes_for, use_queues

use_queues(os.environ["GREENOPS_TEST_TASK_QUEUE"],
           routes_for(os.environ["GREENOPS_TEST_TASK_QUEUE"])[0])
