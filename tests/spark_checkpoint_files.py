"""Spark checkpoint files for tests, laid out as Spark writes them and SparkCheckpoint reads them."""

from __future__ import annotations

from pathlib import Path

from txkafka.connector.checkpoint.spark_checkpoint import COMMITS, METADATA, OFFSETS


def write_metadata(root: Path, query_id: str = "query-1") -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / METADATA).write_text(f'{{"id":"{query_id}"}}\n')


def write_offsets(root: Path, batch: int, *sources: str, watermark_ms: int = 0,
                  version: str = "v1") -> None:
    """``offsets/<batch>`` with one line per source (its end offset as JSON, or "-"; in Spark's
    v2 format, ``name:offset``)."""
    (root / OFFSETS).mkdir(parents=True, exist_ok=True)
    lines = [version, f'{{"batchWatermarkMs":{watermark_ms}}}', *sources]
    (root / OFFSETS / str(batch)).write_text("\n".join(lines) + "\n")


def write_commits(root: Path, *batches: int, crc: bool = False) -> None:
    """``commits/<batch>`` for each batch; ``crc``: with the checksum file Hadoop writes beside it."""
    (root / COMMITS).mkdir(parents=True, exist_ok=True)
    for b in batches:
        (root / COMMITS / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
        if crc:
            (root / COMMITS / f".{b}.crc").write_text("")
