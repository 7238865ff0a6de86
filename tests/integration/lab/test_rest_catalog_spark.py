"""Spark's own Iceberg runtime (3.5 and 4.1, each on its own PySpark line) reads a table
through the lab's REST catalog: Iceberg's ``RESTCatalog`` with OAuth2 client credentials,
the files on SeaweedFS through ``S3FileIO``; it sees what pyiceberg committed there."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from support.jvm_readers import reader_process_env
from support.rest_fixtures import ensure_running
from support.spark_lines import python_of

from lab.rest_catalog import REST_CATALOG_SET, RestCatalogServer
from pipeline import jvm

ROOT = Path(__file__).resolve().parents[3]
READER = ROOT / "tests" / "jvm_reader" / "read_iceberg_rest.py"
# PySpark line -> (the manifest set holding its Iceberg runtime, the runtime's name prefix)
RUNTIMES = {
    "3.5.7": ("jvm-reader", "iceberg-spark-runtime-3.5_2.12-"),
    "4.1.1": ("peer-spark-iceberg", "iceberg-spark-runtime-4.1_2.13-"),
}

pytestmark = pytest.mark.slow


def _jar(set_name: str, prefix: str) -> str:
    found = sorted(jvm.fetch(set_name).glob(f"{prefix}*.jar"))
    assert found, f"no {prefix}*.jar in the manifest set {set_name}"
    return str(found[0])


@pytest.mark.parametrize("line", sorted(RUNTIMES))
def test_spark_reads_through_the_rest_catalog(rest_catalog: RestCatalogServer, line: str) -> None:
    from pyiceberg.catalog import load_catalog

    ensure_running(rest_catalog)
    catalog = load_catalog("rest", **rest_catalog.pyiceberg_properties())
    catalog.create_namespace_if_not_exists("db")
    name = f"db.spark_{uuid.uuid4().hex[:8]}"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    table = catalog.create_table(name, schema=schema)
    table.append(pa.table({"id": [1, 2, 3]}, schema=schema))
    table.append(pa.table({"id": [4, 5]}, schema=schema))

    runtime = _jar(*RUNTIMES[line])
    bundle = _jar(REST_CATALOG_SET, "iceberg-aws-bundle-")
    store = rest_catalog.store
    done = subprocess.run(
        [
            python_of(line), str(READER),
            "--jars", f"{runtime},{bundle}",
            "--uri", rest_catalog.uri,
            "--credential", rest_catalog.client.credential,
            "--oauth2-server-uri", rest_catalog.token_uri,
            "--warehouse", rest_catalog.warehouse,
            "--s3-endpoint", store.endpoint,
            "--s3-access-key-id", store.access_key,
            "--s3-secret-access-key", store.secret_key,
            "--s3-region", store.region,
            name,
        ],
        capture_output=True, text=True, timeout=420, cwd=ROOT,
        env={
            **reader_process_env(),
            "AWS_REGION": store.region,
            "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
            "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
        },
    )  # fmt: skip
    docs = [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert done.returncode == 0 and len(docs) == 1, (docs, done.stderr[-3000:])
    doc = docs[0]
    assert doc["spark"] == line
    assert doc["ids"] == [1, 2, 3, 4, 5]
    assert doc["snapshots"] == 2
    # it went through the server's token endpoint and catalog routes
    log = rest_catalog.log_path.read_text()
    namespace, table_name = name.split(".")
    assert f"GET /v1/namespaces/{namespace}/tables/{table_name} 200" in log
