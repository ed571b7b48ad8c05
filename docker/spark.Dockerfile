# A Spark driver with txkafka installed (Spark runs in local mode inside the container).
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/txkafka
COPY . .
RUN pip install --no-cache-dir .
# This image only runs Spark: opt in to importing pyspark's bytecode in Spark's Python processes.
RUN txkafka pyspark-bytecode enable
ENV PYSPARK_PYTHON=python
