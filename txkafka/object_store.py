"""What a user's program imports for a checkpoint on an object store.

``s3_options(spark)`` copies the session's ``spark.hadoop.fs.s3a.*`` settings into writer options,
so the sink's own access to the checkpoint (its commit log) uses what Spark's s3a uses. It lives in
the checkpoint package, which owns the settings; this is its public name.
"""

from .connector.checkpoint.object_store import s3_options

__all__ = ["s3_options"]
