# The Harvester image: the official Airflow image with our lock, the harvester package and
# Playwright's Chromium (downloaded here, at build time, where the internet is reachable). The runtime pins only
# (requirements.txt): the test tools and the stand-in database are in requirements-dev.txt, never installed here.
# Every service runs as the non-root airflow user (compose: user ${AIRFLOW_UID}:0), which also lets
# Chromium use its own sandbox in worker-pageslots (HARVESTER_CHROMIUM_SANDBOX, docs/production.md).
# Stages: `harvester` (the production image), `demo` (the same plus the demo site's package, demo/, for
# compose's `--profile demo` service only), and the last one, which a plain `docker build .` makes: the
# production image again, without the demo.
FROM apache/airflow:3.3.2-python3.11 AS harvester

USER root
ENV PLAYWRIGHT_BROWSERS_PATH=/opt/ms-playwright
COPY requirements.txt requirements.lock /opt/harvester/
USER airflow
RUN pip install --no-cache-dir -r /opt/harvester/requirements.txt -c /opt/harvester/requirements.lock

USER root
RUN /home/airflow/.local/bin/playwright install --with-deps chromium \
    && ln -s "$(find /opt/ms-playwright -path '*chrome-linux*/chrome' -type f | head -n 1)" /usr/local/bin/harvester-chromium \
    && chmod -R a+rX /opt/ms-playwright
ENV HARVESTER_CHROMIUM_EXECUTABLE=/usr/local/bin/harvester-chromium

# The simple auth manager's passwords file lives on a volume mounted here (airflow-init writes it); a
# new named volume takes this directory's owner, so the airflow user can write it.
RUN mkdir -p /opt/airflow/auth && chown airflow:0 /opt/airflow/auth && chmod 770 /opt/airflow/auth

USER airflow
COPY --chown=airflow:root include /opt/airflow/include
# The demo sources harvest the demo site, which production does not run: compose's demo-sources service adds
# them (--profile demo); the production image carries only the operator's sources.
RUN find /opt/airflow/include/sources -maxdepth 1 -name 'demo_*.yaml' -delete \
    && pip install --no-cache-dir --no-deps -e /opt/airflow/include
COPY --chown=airflow:root dags /opt/airflow/dags
COPY --chown=airflow:root plugins /opt/airflow/plugins

# The demo target site (compose's demo-site service, `--profile demo`): its package on top of the image.
FROM harvester AS demo
COPY --chown=airflow:root demo /opt/harvester-demo
RUN pip install --no-cache-dir --no-deps /opt/harvester-demo

FROM harvester AS production
