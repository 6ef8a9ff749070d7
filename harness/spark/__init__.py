"""The Spark engine, one job per module.

- :mod:`harness.spark.session`: the SparkSession (interpreter, JDK 17, local binding, Arrow).
- :mod:`harness.spark.io`: inputs from any Spark path (local, ``s3a://``, ``hdfs://``) or frame,
  with the column / id-type checks of :mod:`harness.data`.
- :mod:`harness.spark.split`: the splits of :mod:`harness.split`, their filters and stats.
- :mod:`harness.spark.candidates`: sampled candidates, the rows of :mod:`harness.candidates`.
- :mod:`harness.spark.topk`: each user's top-k of a score table.
- :mod:`harness.spark.metrics`: per-user metrics, ``metrics.evaluate`` run per bucket of users.
- :mod:`harness.spark.aggregate`: the buckets' mergeable states merged and finished by
  ``metrics``' own functions.

PySpark is imported lazily, so the package imports without it.
"""

from harness.spark.candidates import sample_negatives_spark
from harness.spark.io import read_interactions
from harness.spark.metrics import evaluate_spark
from harness.spark.session import JAVA17_HOME, spark_session
from harness.spark.split import (
    SparkSplit,
    apply_filters_spark,
    global_time_spark,
    leave_one_out_spark,
    make_split_spark,
    method_split_spark,
    random_split_spark,
    user_time_spark,
)
from harness.spark.topk import topk_spark

__all__ = [
    "JAVA17_HOME",
    "SparkSplit",
    "apply_filters_spark",
    "evaluate_spark",
    "global_time_spark",
    "leave_one_out_spark",
    "make_split_spark",
    "method_split_spark",
    "random_split_spark",
    "read_interactions",
    "sample_negatives_spark",
    "spark_session",
    "topk_spark",
    "user_time_spark",
]
