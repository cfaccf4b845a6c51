"""
The C{kafkatw} PySpark data source (docs/spark.md).

    import kafkatw.spark
    kafkatw.spark.register(spark)
    df = (spark.readStream.format("kafkatw")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "logs").load())

Needs the C{spark} extra (C{pip install kafkatw[spark]}: pyspark 4.3,
pyarrow, pandas).
"""

from __future__ import annotations

from typing import Any

from ._source import DataLossError, KafkaInputPartition, KafkatwDataSource, kafka_schema

__all__ = ["register", "KafkatwDataSource", "KafkaInputPartition", "DataLossError", "kafka_schema"]


def register(spark: Any) -> None:
    """Register the data source C{kafkatw} with the SparkSession C{spark}."""
    spark.dataSource.register(KafkatwDataSource)
