import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

from greenops.webserver import behind_proxies

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "greenops.settings")
# Behind trusted proxies (WEB_FORWARDED_ALLOW_IPS), REMOTE_ADDR is the client they name. Agents'
# sample batches are answered before Django's handler (greenops/api/fastpath.py).
django_application = get_wsgi_application()
from greenops.api.fastpath import SamplesFirst  # noqa: E402 (it needs the apps loaded)
from greenops.celery import prepare_publishing  # noqa: E402

application = behind_proxies(SamplesFirst(django_application))

# Every view module now (Django would import the URLconf on the first request), then move all
# that startup made -- modules, classes, URL patterns: 203,000 objects -- out of the cyclic
# garbage collector's reach. They live as long as the process, yet each full collection walked
# them all: 57 ms alone on a 2-core machine, 60-120 ms pauses inside whatever request set one
# off (the slowest of a 10,000-GPU team page's requests was its median plus one such pause).
# After gc.freeze() a full collection walks only what requests allocate (14-32 ms measured in
# bench/dashboard's process, whose pages build large figures).
get_resolver().url_patterns  # noqa: B018 (the import is the point)
prepare_publishing()  # Celery's, before the first agent POST queues a store task
gc.freeze()
