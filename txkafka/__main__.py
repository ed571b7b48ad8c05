from txkafka.cli import run

raise SystemExit(run())
