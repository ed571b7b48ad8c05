"""What loading txkafka's Spark adapters pulls in (Spark loads the sink's module in every Python
process that creates the stream's writer or commits a batch, each one new), and what a Python
worker's first read task pulls in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _pandas_modules_after(code: str) -> str:
    """The pandas modules loaded once ``code`` ran in a new interpreter (at the repository root)."""
    code += "\nimport sys\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_loading_the_reader_and_the_writer_does_not_import_pandas():
    # pyarrow imports pandas (about 0.3 s of CPU) whenever an array is built from Python values
    # or a numpy array; nothing at module level may do that.
    assert _pandas_modules_after("import txkafka.python_datasource.kafka_writer, "
                                 "txkafka.python_datasource.kafka_reader, pyspark_txkafka") == "[]"


def test_decoding_a_fetch_response_into_spark_batches_does_not_import_pandas():
    """A Python worker's first read task (txkafka's own fetch: decode, then Spark's schema,
    headers included) builds every array from buffers."""
    code = ("from tests.record_batch_encoding import Record, batch\n"
            "from txkafka.connector.client.record_batch_decoder import decode\n"
            "from txkafka.connector.source.range_reader import decoded_batches\n"
            "recs = [Record(key=b'k', value=b'v' * 20, headers=[('h', b'x')] if i % 2 else [])"
            " for i in range(50)]\n"
            "d = decode(batch(0, recs), 0, 50, include_headers=True)\n"
            "out = list(decoded_batches(d, 'topic', 3, True))\n"
            "assert sum(b.num_rows for b in out) == 50, out")
    assert _pandas_modules_after(code) == "[]"
