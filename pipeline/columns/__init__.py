"""The columns of a pipeline's tables, independent of any table format: the model
(:mod:`pipeline.columns.model`) and the changes a restart may make to a table's columns
(:mod:`pipeline.columns.evolution`)."""

from pipeline.columns.model import (
    ALLOWED_TYPES,
    HEADERS_TYPE,
    HEADERS_TYPE_NAME,
    KAFKA_COLUMN_NAMES,
    KAFKA_COLUMNS,
    Column,
    ColumnType,
    Decimal,
    FieldSpec,
    ListOf,
    MapOf,
    Primitive,
    StructOf,
    TypeSpec,
    data_columns,
    dead_letter_columns,
    parse_type,
    spark_ddl,
    struct_spec,
    table_columns,
)

__all__ = [
    "ALLOWED_TYPES",
    "HEADERS_TYPE",
    "HEADERS_TYPE_NAME",
    "KAFKA_COLUMNS",
    "KAFKA_COLUMN_NAMES",
    "Column",
    "ColumnType",
    "Decimal",
    "FieldSpec",
    "ListOf",
    "MapOf",
    "Primitive",
    "StructOf",
    "TypeSpec",
    "data_columns",
    "dead_letter_columns",
    "parse_type",
    "spark_ddl",
    "struct_spec",
    "table_columns",
]
