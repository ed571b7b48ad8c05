"""The chaos driver: the Kafka -> txkafka -> Kafka pipeline under repeated crashes, counted exactly.

Why a package: the CI suite (integration_tests/test_chaos.py) and the long soak
(``python -m integration_tests.chaos.soak``) run the same campaigns; only their length differs.

- ``feeder``: a transactional producer feeding the input topic while the pipeline runs (some
  transactions aborted; unique ids, or group keys repeated a known number of times).
- ``processes``: pipeline drivers in their own session, SIGKILLed as a whole (a crashed machine).
- ``campaign``: one pipeline, many rounds; each round ends in a crash (an injected point, a random
  moment, a broker or an executor) and the restart recovers from the same checkpoint; finally the
  output is verified read_committed (duplicates AND gaps) and no transaction of the sink stays open.
- ``summary``: what a run of campaigns proved (rounds, kills per point, records verified).
"""
