"""What loading txkafka's Spark adapters pulls in: Spark loads the sink's module in every Python
process that creates the stream's writer or commits a batch, each one new."""

from __future__ import annotations

import subprocess
import sys


def test_loading_the_reader_and_the_writer_does_not_import_pandas():
    # pyarrow imports pandas (about 0.3 s of CPU) whenever an array is built from Python values
    # or a numpy array; nothing at module level may do that.
    code = ("import sys, txkafka.python_datasource.kafka_writer, "
            "txkafka.python_datasource.kafka_reader, pyspark_txkafka\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
