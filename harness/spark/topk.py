"""Each user's top-k of a score table on Spark, in the order and tie rule of ``metrics``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.spark.io import _is_integer_type
from metrics.checks import require_choice, require_columns, require_int
from metrics.options import CHOICES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def topk_spark(
    scores_df: DataFrame,
    k: int,
    tie_break: str = "item_asc",
    id_order: str = "natural",
    tie_column: str = "item",
) -> DataFrame:
    """Each user's ``k`` best rows of a (user, item, score) table, with a 1-based ``rank``.

    Order: score descending, then the tie rule of ``metrics`` (``item_asc``, ``item_desc`` or
    ``input_order`` = Spark's row order), ids compared as ``id_order`` says (``string``: an
    integer id by its decimal text, as ``metrics`` and trec_eval compare them); ``tie_column``:
    the column of ids ties are ordered by. Scores must be finite, as in ``metrics.evaluate``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    require_int("k", k)
    require_choice("tie_break", tie_break, CHOICES["tie_break"])
    require_choice("id_order", id_order, CHOICES["id_order"])
    require_columns(scores_df.columns, ("user", "item", "score"), "scores")
    cols = scores_df.columns
    df = scores_df
    if tie_break == "input_order":
        df = df.withColumn("_topk_row", sf.monotonically_increasing_id())
        tie = sf.col("_topk_row").asc()
    else:
        item = sf.col(tie_column)
        if id_order == "string" and _is_integer_type(df.schema[tie_column].dataType):
            item = item.cast("string")
        tie = item.asc() if tie_break == "item_asc" else item.desc()
    order = Window.partitionBy("user").orderBy(sf.col("score").desc(), tie)
    ranked = df.withColumn("rank", sf.row_number().over(order))
    return ranked.filter(sf.col("rank") <= k).select(*cols, "rank")
