from txkafka.cli import main

raise SystemExit(main())
