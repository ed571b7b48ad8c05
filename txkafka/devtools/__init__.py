"""Developer tooling: the benchmarks, the tests' JVM start-up archive and their Spark home.

Owns: ``python -m txkafka.devtools bench`` (``bench``, with its ``tasks`` suite in
``bench_tasks`` and what the suites share in ``bench_runs``), ``python -m txkafka.devtools
bench-endurance`` (``bench_endurance``),
``python -m txkafka.devtools.bench_produce`` (one task's transaction on each producer, without
Spark), the class-data-sharing archive of Spark's JVM (``jvm_startup``) and the test suite's
Spark home (``spark_home_for_tests``).

May import anything of txkafka. Nothing else imports it; the wheel does not ship it. Its commands
run from the repository: ``python -m txkafka.devtools`` (``cli``).
"""
