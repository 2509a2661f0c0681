# The server image: web (Granian, greenops/webserver.py), worker and beat all run from it (see
# docker-compose.yml).
FROM python:3.11-slim

# WEB_CONCURRENCY: the web's worker processes (unset: one per CPU), WEB_THREADS the threads of
# each (4), WEB_BIND where it listens (greenops/webserver.py reads them; compose passes
# WEB_CONCURRENCY through).
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 WEB_BIND=0.0.0.0:8000
WORKDIR /app

COPY pyproject.toml README.md ./
COPY collectors/ collectors/
COPY greenops/ greenops/
COPY dashboards/ dashboards/
COPY templates/ templates/
COPY manage.py ./
# Editable install: the app runs from /app, where templates/ and static files live. pip compiles
# the dependencies' bytecode; PYTHONDONTWRITEBYTECODE would leave the app's own modules to be
# compiled again by every web, Celery and beat process at each start, so compile them here.
RUN pip install -e . && python manage.py collectstatic --noinput \
    && python -m compileall -q collectors greenops dashboards manage.py

RUN useradd --system --uid 1000 greenops && mkdir -p /app/var && chown greenops /app/var
USER greenops
EXPOSE 8000
# Granian with keep-alive (60 s) and an access log; see docker-compose.yml's web service.
ENV WEB_ACCESS_LOG=1
CMD ["python", "-m", "greenops.webserver"]
