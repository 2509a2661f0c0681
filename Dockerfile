# The server image: web (gunicorn), worker and beat all run from it (see docker-compose.yml).
FROM python:3.11-slim

# WEB_CONCURRENCY: gunicorn's worker processes (gunicorn reads it; compose passes it through).
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 WEB_CONCURRENCY=4
WORKDIR /app

COPY pyproject.toml README.md ./
COPY collectors/ collectors/
COPY greenops/ greenops/
COPY dashboards/ dashboards/
COPY templates/ templates/
COPY manage.py ./
# Editable install: the app runs from /app, where templates/ and static files live. pip compiles
# the dependencies' bytecode; PYTHONDONTWRITEBYTECODE would leave the app's own modules to be
# compiled again by every gunicorn, Celery and beat process at each start, so compile them here.
RUN pip install -e . && python manage.py collectstatic --noinput \
    && python -m compileall -q collectors greenops dashboards manage.py

RUN useradd --system --uid 1000 greenops && mkdir -p /app/var && chown greenops /app/var
USER greenops
EXPOSE 8000
# gthread keeps client (or proxy) connections open; see docker-compose.yml's web service.
CMD ["gunicorn", "greenops.wsgi", "--bind", "0.0.0.0:8000", "--worker-class", "gthread", \
     "--threads", "2", "--keep-alive", "75", "--access-logfile", "-"]
